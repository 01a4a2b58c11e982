package httpdrain

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/httpdrain/httpdraintest"
)

// TestShutdownClosesSilentConnection: a server whose ConnState and Shutdown
// are a Tracker's stops within httpdraintest.Bound while a client holds a
// connection on which it sent nothing, and that connection is closed; a
// request under way at the shutdown is answered first.
func TestShutdownClosesSilentConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		<-release
		_, _ = io.WriteString(w, "answered")
	})}
	u := New(time.Now)
	srv.ConnState = u.ConnState
	go func() { _ = srv.Serve(ln) }()
	silent := httpdraintest.DialTCP(t, ln.Addr().String())
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- string(b)
	}()
	time.Sleep(100 * time.Millisecond) // both accepted, the request under way

	ctx, cancel := context.WithTimeout(context.Background(), 2*httpdraintest.Bound)
	defer cancel()
	stopped := time.Now()
	done := make(chan error, 1)
	go func() { done <- u.Shutdown(ctx, srv) }()
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(stopped); took > httpdraintest.Bound {
		t.Errorf("Shutdown took %v with a silent connection open, want under %v", took, httpdraintest.Bound)
	}
	if got := <-answer; got != "answered" {
		t.Errorf("the request under way at the shutdown got %q, want its answer", got)
	}
	_ = silent.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the silent connection after shutdown: read %v, want EOF (closed by the server)", err)
	}
}

// TestPlainServerWaitsForSilentConnections is the negative control: without
// the Tracker, net/http's Shutdown holds for the same silent connection past
// httpdraintest.Bound, so the test above (and the servers' own, in pkg/discovery
// and pkg/gateway) would catch a server that lost it.
func TestPlainServerWaitsForSilentConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go func() { _ = srv.Serve(ln) }()
	httpdraintest.DialTCP(t, ln.Addr().String())
	time.Sleep(100 * time.Millisecond) // accepted
	ctx, cancel := context.WithTimeout(context.Background(), httpdraintest.Bound)
	defer cancel()
	if err := srv.Shutdown(ctx); err == nil {
		t.Fatalf("net/http's Shutdown returned within %v with a silent connection open: the test above proves nothing", httpdraintest.Bound)
	}
	_ = srv.Close()
}

// TestCloseSilent: only a connection unused for unusedAge with nothing
// waiting to be read is closed; one that began a request is forgotten.
func TestCloseSilent(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	now := t0
	u := New(func() time.Time { return now })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// accept returns the server's side of a new connection and the client's.
	accept := func() (server, client net.Conn) {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close(); server.Close() })
		return server, client
	}
	silentOld, silentOldClient := accept()
	u.ConnState(silentOld, http.StateNew)
	pendingOld, pendingOldClient := accept()
	u.ConnState(pendingOld, http.StateNew)
	if _, err := io.WriteString(pendingOldClient, "GET / HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	used, _ := accept()
	u.ConnState(used, http.StateNew)
	u.ConnState(used, http.StateActive)
	now = t0.Add(unusedAge / 2)
	silentYoung, _ := accept()
	u.ConnState(silentYoung, http.StateNew)
	time.Sleep(50 * time.Millisecond) // the pending bytes arrive

	if got := u.closeSilent(); got != 0 {
		t.Fatalf("closeSilent before any connection is %v old closed %d, want 0", unusedAge, got)
	}
	now = t0.Add(unusedAge)
	if got := u.closeSilent(); got != 1 {
		t.Fatalf("closeSilent closed %d, want 1 (the old silent connection)", got)
	}
	_ = silentOldClient.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := silentOldClient.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the old silent connection: read %v, want EOF (closed by the server)", err)
	}
	for name, c := range map[string]net.Conn{"with bytes waiting": pendingOld, "young": silentYoung, "used": used} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			t.Errorf("the %s connection was closed: %v", name, err)
		}
	}
	if got, want := u.n.Load(), int64(2); got != want {
		t.Errorf("tracking %d connections, want %d (the young one and the one with bytes waiting)", got, want)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
