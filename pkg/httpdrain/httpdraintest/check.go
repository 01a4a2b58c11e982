package httpdraintest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// Bound is how soon Serve must return: well under net/http's 5 s rule for
// connections on which no request began, well over the second after which
// a Tracker closes them.
const Bound = 3 * time.Second

// ServeStopsWithSilentConnection starts serve on a loopback listener, opens a
// connection to it with dial on which nothing is sent (nil dials plain TCP; a
// TLS dial should finish its handshake), cancels serve's context, and fails t
// unless serve returns nil within Bound and the server closed the
// connection.
func ServeStopsWithSilentConnection(t *testing.T, serve func(ctx context.Context, ln net.Listener) error, dial func(t *testing.T, addr string) net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	if dial == nil {
		dial = DialTCP
	}
	silent := dial(t, ln.Addr().String())
	time.Sleep(100 * time.Millisecond) // accepted

	cancel()
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(Bound):
		t.Fatalf("Serve still shutting down %v after cancel: it waits for the silent connection", Bound)
	}
	t.Logf("stopped in %v", time.Since(stopped).Round(time.Millisecond))
	_ = silent.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("the silent connection after Serve returned: read %v, want it closed by the server", err)
	}
}

// DialTCP connects to addr, closing the connection when t ends.
func DialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
