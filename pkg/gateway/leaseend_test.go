package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/test/tunneltest"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// streamingProxy stands in for a leased proxy: CONNECT tunnels to an echo,
// plain requests to a response that streams until the request ends.
func streamingProxy(t *testing.T) string {
	t.Helper()
	chunk := make([]byte, 8<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			for r.Context().Err() == nil {
				// A chunk over the gateway's response buffer, which it
				// does not flush on its own.
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
		_, _ = io.Copy(conn, brw)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// gatewayTunnel opens a tunnel through the gateway at addr in session.
func gatewayTunnel(t *testing.T, addr, session string) net.Conn {
	t.Helper()
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("session-"+session+":tok"))
	conn, _, err := tunneltest.Tunnel(addr, auth, "site.example:443")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// A lease's end ends its traffic in the gateway: when a renewal finds the
// lease ended (released through the API, its proxy gone), its tunnel and a
// streaming request on it stop; another session's tunnel goes on (the
// negative control). A lease carrying traffic is checked every
// trafficCheck, not only at half its TTL, so the end is seen within 30 s.
func TestTrafficEndsWithItsLease(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := newFakeLeaser(clk.Now)
	f.proxyAddr = streamingProxy(t)
	g, err := New(DefaultOptions(), Deps{Leaser: f, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, g)
	ctx := context.Background()

	ended := gatewayTunnel(t, addr, "a")
	kept := gatewayTunnel(t, addr, "b")
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr, User: url.UserPassword("session-a", "tok")})}}
	resp, err := hc.Get("http://site.example/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	streamed := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); streamed <- err }()
	if !tunneltest.Relays(ended) || !tunneltest.Relays(kept) {
		t.Fatal("the tunnels do not relay")
	}
	idA, idB := sessionLease(t, g, "session-a"), sessionLease(t, g, "session-b")

	// Before the traffic check nothing is renewed, nothing ends.
	clk.Step(trafficCheck - time.Second)
	g.leases.tick(ctx)
	if n := f.count("renew "); n != 0 {
		t.Fatalf("%d renewals before the traffic check", n)
	}
	// At the check, a's lease is found ended; b's is renewed.
	clk.Step(time.Second)
	f.failRenewOf(idA, &client.APIError{StatusCode: http.StatusGone, Code: wire.CodeLeaseEnded})
	g.leases.tick(ctx)
	if !tunneltest.StopsRelaying(ended, 5*time.Second) {
		t.Error("the ended lease's tunnel still relays")
	}
	select {
	case err := <-streamed:
		if err == nil {
			t.Error("the ended lease's stream ended as if complete; want it cut")
		}
	case <-time.After(5 * time.Second):
		t.Error("the ended lease's stream still runs")
	}
	if !tunneltest.Relays(kept) {
		t.Error("the other session's tunnel was ended")
	}
	// At least once: the gateway's own tick (on the same fake clock) may
	// renew it beside this test's.
	if f.count("renew "+idB) < 1 {
		t.Errorf("the live lease carrying a tunnel was not renewed at the traffic check: %v", f.calls)
	}
	if f.liveIDs()[idA] != true {
		t.Error("the gateway released a lease it was told had ended (want no call)")
	}
}

// A lease whose renewals fail (the API unreachable) ends with its expiry:
// its traffic stops then, not before.
func TestTrafficEndsAtExpiryWhenRenewalsFail(t *testing.T) {
	ls, f, clk := testLeases(t)
	ctx := context.Background()
	h, done, err := ls.acquire(ctx, "tok", "u", UsernameOptions{}, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for elapsed := time.Duration(0); elapsed < DefaultLeaseTTL; elapsed += ls.opts.tickEvery() {
		if h.traffic.Err() != nil {
			t.Fatalf("traffic ended %s into a %s lease", elapsed, DefaultLeaseTTL)
		}
		clk.Step(ls.opts.tickEvery())
		f.mu.Lock()
		f.nextErr = errors.New("dial tcp: connection refused")
		f.mu.Unlock()
		ls.tick(ctx)
	}
	if h.traffic.Err() == nil {
		t.Fatal("the traffic of an expired lease goes on")
	}
}

// A token the lease API no longer takes (revoked: 401; its rights removed:
// 403) ends its traffic at the next renewal, not at the lease's expiry.
func TestTrafficEndsWhenTheTokenIsRevoked(t *testing.T) {
	for _, code := range []string{wire.CodeUnauthorized, wire.CodeForbidden} {
		ls, f, clk := testLeases(t)
		ctx := context.Background()
		h, done, err := ls.acquire(ctx, "tok", "u", UsernameOptions{}, "x")
		if err != nil {
			t.Fatal(err)
		}
		f.failRenewOf(h.id, &client.APIError{StatusCode: http.StatusUnauthorized, Code: code})
		clk.Step(trafficCheck)
		ls.tick(ctx)
		if h.traffic.Err() == nil {
			t.Errorf("%s at a renewal: the traffic goes on", code)
		}
		done()
	}
}

// sessionLease is the lease ID of token "tok"'s session of username.
func sessionLease(t *testing.T, g *Gateway, username string) string {
	t.Helper()
	key, _ := sessionKey("tok", username)
	g.leases.mu.Lock()
	defer g.leases.mu.Unlock()
	s := g.leases.sessions[key]
	if s == nil {
		t.Fatalf("no session %s", username)
	}
	return s.h.id
}
