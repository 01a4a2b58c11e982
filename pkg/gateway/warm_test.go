package gateway

import (
	"bufio"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/test/tunneltest"
)

// recordingProxy stands in for a leased proxy and records its connections:
// when each was accepted, and the Proxy-Authorization of the CONNECT it
// carried (if any). It answers each CONNECT 200 and echoes the tunnel,
// unless dropNext is set: then it closes the next connection that sends a
// CONNECT without answering (a proxy that had closed an idle connection).
type recordingProxy struct {
	addr string

	mu       sync.Mutex
	conns    []*proxyConn
	dropNext bool
}

type proxyConn struct {
	c        net.Conn
	accepted time.Time
	// auth is the CONNECT's Proxy-Authorization ("" until one arrives);
	// ended is closed when the connection ends.
	auth  string
	ended chan struct{}
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{addr: ln.Addr().String()}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, pc := range p.conns {
			pc.c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			pc := &proxyConn{c: c, accepted: time.Now(), ended: make(chan struct{})}
			p.mu.Lock()
			p.conns = append(p.conns, pc)
			p.mu.Unlock()
			go p.serve(pc)
		}
	}()
	return p
}

func (p *recordingProxy) serve(pc *proxyConn) {
	defer close(pc.ended)
	defer pc.c.Close()
	br := bufio.NewReader(pc.c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	p.mu.Lock()
	pc.auth = req.Header.Get("Proxy-Authorization")
	drop := p.dropNext
	p.dropNext = false
	p.mu.Unlock()
	if drop {
		return
	}
	_, _ = io.WriteString(pc.c, "HTTP/1.1 200 Connection established\r\n\r\n")
	_, _ = io.Copy(pc.c, br)
}

// snapshot is the connections so far.
func (p *recordingProxy) snapshot() []proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]proxyConn, len(p.conns))
	for i, pc := range p.conns {
		out[i] = *pc
	}
	return out
}

// waitConns waits until the proxy accepted n connections.
func (p *recordingProxy) waitConns(t *testing.T, n int) []proxyConn {
	t.Helper()
	eventually(t, "the proxy accepts a warm connection", func() bool { return len(p.snapshot()) >= n })
	return p.snapshot()
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// TestWarmConnections: after a tunnel through a proxy, the gateway keeps one
// connection to that proxy dialled ahead and sends nothing on it; the next
// tunnel, of another lease, sends its CONNECT with its own lease's
// credentials on that connection; a warm connection the proxy closed, or
// one that ends as the CONNECT is sent, does not fail the tunnel (it goes
// through a new one); one unused for warmIdle is closed, as are all when
// the gateway stops.
func TestWarmConnections(t *testing.T) {
	proxy := newRecordingProxy(t)
	clk := clocktesting.NewFakeClock(time.Now())
	f := newFakeLeaser(clk.Now)
	f.proxyAddr = proxy.addr
	g, err := New(DefaultOptions(), Deps{Leaser: f, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serveUntilStopped(t, g)
	tunnel := func() {
		t.Helper()
		conn, _, err := tunneltest.Tunnel(addr, basicAuth("x", "tok"), "site.example:443")
		if err != nil {
			t.Fatal(err)
		}
		if !tunneltest.Relays(conn) {
			t.Fatal("the tunnel does not relay")
		}
		conn.Close()
	}

	tunnel()
	// The first tunnel dials its own connection while the first warm one
	// is dialled: either may reach the proxy first.
	conns := proxy.waitConns(t, 2)
	_, w0 := split(t, conns[:2], basicAuth("u-l1", "p"))
	warm := conns[w0]
	time.Sleep(50 * time.Millisecond)
	if got := proxy.snapshot()[w0].auth; got != "" {
		t.Fatalf("a warm connection carried a CONNECT before a tunnel took it: %q", got)
	}

	warmReady(t, g, proxy.addr)
	before := time.Now()
	tunnel()
	conns = proxy.waitConns(t, 3)
	if conns[w0].auth != basicAuth("u-l2", "p") {
		t.Fatalf("the second tunnel's CONNECT went on %v (warm: accepted %v, carried %q), want the warm one with its own lease's credentials",
			conns, warm.accepted, conns[w0].auth)
	}
	if !warm.accepted.Before(before) {
		t.Fatal("the warm connection was accepted after the second tunnel began")
	}

	// The proxy closes the warm connection: the next tunnel uses a new one
	// (as the next warm one is dialled).
	warmReady(t, g, proxy.addr)
	conns[2].c.Close()
	<-conns[2].ended
	tunnel()
	conns = proxy.waitConns(t, 5)
	_, w := split(t, conns[3:5], basicAuth("u-l3", "p"))
	if conns[2].auth != "" {
		t.Fatalf("a CONNECT went on the warm connection the proxy had closed: %+v", conns)
	}

	// It closes the next one as the CONNECT arrives: the tunnel goes through
	// a new connection all the same.
	warmReady(t, g, proxy.addr)
	proxy.mu.Lock()
	proxy.dropNext = true
	proxy.mu.Unlock()
	tunnel()
	conns = proxy.waitConns(t, 7)
	if conns[3+w].auth != basicAuth("u-l4", "p") {
		t.Fatalf("the tunnel did not take the warm connection: %+v", conns)
	}
	_, w = split(t, conns[5:7], basicAuth("u-l4", "p"))

	// Unused for warmIdle: closed at the next tick.
	idle := conns[5+w]
	warmReady(t, g, proxy.addr)
	select {
	case <-idle.ended:
		t.Fatal("a warm connection closed before warmIdle")
	case <-time.After(50 * time.Millisecond):
	}
	o := DefaultOptions()
	clk.Step(warmIdle + o.tickEvery())
	select {
	case <-idle.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("a warm connection unused for warmIdle is still open")
	}

	// Shutdown closes the warm connections.
	tunnel()
	conns = proxy.waitConns(t, 9)
	_, w = split(t, conns[7:9], basicAuth("u-l5", "p"))
	stop()
	select {
	case <-conns[7+w].ended:
	case <-time.After(10 * time.Second):
		t.Fatal("a warm connection outlived the gateway")
	}
}

// warmReady waits until g holds the warm connection to addr it dials in
// the background, so that the next step finds it (or expires it).
func warmReady(t *testing.T, g *Gateway, addr string) {
	t.Helper()
	eventually(t, "the gateway holds a warm connection", func() bool {
		g.warm.mu.Lock()
		defer g.warm.mu.Unlock()
		_, ok := g.warm.conns[addr]
		return ok
	})
}

// split: of two new connections, one carried auth's CONNECT and the other
// is warm (nothing sent on it yet); it returns their indexes.
func split(t *testing.T, two []proxyConn, auth string) (tunnel, warm int) {
	t.Helper()
	switch {
	case two[0].auth == auth && two[1].auth == "":
		return 0, 1
	case two[1].auth == auth && two[0].auth == "":
		return 1, 0
	}
	t.Fatalf("want one new connection with the CONNECT of %q and one warm, got %+v", auth, two)
	return 0, 0
}

// TestQuiet: a warm connection is taken only while it is open and the
// proxy sent nothing on it.
func TestQuiet(t *testing.T) {
	for _, tc := range []struct {
		name string
		peer func(net.Conn)
		want bool
	}{
		{name: "open, nothing sent", peer: func(net.Conn) {}, want: true},
		{name: "closed by the proxy", peer: func(c net.Conn) { c.Close() }, want: false},
		{name: "reset by the proxy", peer: func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, want: false},
		{name: "the proxy sent bytes", peer: func(c net.Conn) { _, _ = io.WriteString(c, "HTTP/1.1 408 Request Time-out\r\n\r\n") }, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := tcpPair(t)
			tc.peer(peer)
			// What the peer did takes a moment to reach c.
			deadline := time.Now().Add(5 * time.Second)
			got := quiet(c)
			for got != tc.want && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				got = quiet(c)
			}
			if got != tc.want {
				t.Errorf("quiet = %v, want %v", got, tc.want)
			}
		})
	}
}
