package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/httpdrain/httpdraintest"
)

// TestServeStopsWithSilentConnection: a client's spare connection to the
// gateway (dialed, nothing sent) does not hold Serve's return, and so the
// replica's shutdown and a handover, for net/http's 5 s; the gateway closes
// it. (pkg/httpdrain's negative control shows net/http alone waits.)
func TestServeStopsWithSilentConnection(t *testing.T) {
	g, err := New(DefaultOptions(), Deps{Leaser: newFakeLeaser(time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	httpdraintest.ServeStopsWithSilentConnection(t, g.Serve, nil)
}

// A client's keep-alive connection idle past --gateway-idle-timeout is
// closed, a refused one included: 500 anonymous connections, each answered
// 407 once, were all still open 150 s later.
func TestIdleConnectionsClose(t *testing.T) {
	o := DefaultOptions()
	o.IdleTimeout = 300 * time.Millisecond
	g, err := New(o, Deps{Leaser: newFakeLeaser(time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-served
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET http://origin.invalid/ HTTP/1.1\r\nHost: origin.invalid\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired || resp.Close {
		t.Fatalf("HTTP %d (close %v), want 407 on a connection kept alive", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(5 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("reading the idle connection: %v, want the gateway to close it (EOF)", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %s idle, want about the idle timeout (300ms)", d)
	}
}
