package gateway

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
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

// serveGateway serves a gateway of o (leasing from the fake) on a loopback
// port until the test ends, and returns its address.
func serveGateway(t *testing.T, o Options) string {
	t.Helper()
	g, err := New(o, Deps{Leaser: newFakeLeaser(time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, g)
}

// serve serves g on a loopback port until the test ends, and returns its
// address.
func serve(t *testing.T, g *Gateway) string {
	t.Helper()
	addr, _ := serveUntilStopped(t, g)
	return addr
}

// serveUntilStopped serves g on a loopback port until stop (which returns
// once Serve has) or the end of the test.
func serveUntilStopped(t *testing.T, g *Gateway) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-served }) }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// A client's keep-alive connection idle past --gateway-idle-timeout is
// closed, a refused one included: 500 anonymous connections, each answered
// 407 once, were all still open 150 s later.
func TestIdleConnectionsClose(t *testing.T) {
	o := DefaultOptions()
	o.IdleTimeout = 300 * time.Millisecond
	addr := serveGateway(t, o)
	conn, err := net.Dial("tcp", addr)
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

// A source address holds at most --gateway-max-unauthenticated-per-source
// connections on which nothing has leased: past it, new ones are closed as
// they are accepted; one that leases, or closes, frees its place.
func TestUnauthenticatedConnectionsPerSource(t *testing.T) {
	o := DefaultOptions()
	o.MaxUnauthenticatedPerSource = 3
	addr := serveGateway(t, o)
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// status sends a request on c (auth: a Proxy-Authorization value, or
	// none) and returns its answer's status, or 0 if c was closed.
	status := func(c net.Conn, auth string) int {
		t.Helper()
		req := "GET http://origin.invalid/ HTTP/1.1\r\nHost: origin.invalid\r\n"
		if auth != "" {
			req += "Proxy-Authorization: " + auth + "\r\n"
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(req + "\r\n")); err != nil {
			return 0
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	var pending []net.Conn
	for range 3 {
		c := dial()
		if got := status(c, ""); got != http.StatusProxyAuthRequired {
			t.Fatalf("a connection within the bound: %d, want 407", got)
		}
		pending = append(pending, c)
	}
	if got := status(dial(), ""); got != 0 {
		t.Fatalf("a fourth connection without a lease: answered %d, want it closed", got)
	}
	// One leases (the fake accepts any token; whatever its proxy answers): a
	// place is free.
	if got := status(pending[0], "Basic "+base64.StdEncoding.EncodeToString([]byte("u:tok"))); got == 0 {
		t.Fatal("a request that leases: no answer")
	}
	if got := status(dial(), ""); got != http.StatusProxyAuthRequired {
		t.Fatalf("after a connection leased: %d, want a new connection answered 407", got)
	}
	// One closes: a place is free.
	_ = pending[1].Close()
	deadline := time.Now().Add(5 * time.Second)
	for status(dial(), "") != http.StatusProxyAuthRequired {
		if time.Now().After(deadline) {
			t.Fatal("after a pending connection closed, new ones are still refused")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
