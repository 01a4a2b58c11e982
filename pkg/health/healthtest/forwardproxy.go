package healthtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds the proxy's own connections to origins.
const dialTimeout = 5 * time.Second

// hopHeaders are removed when forwarding (RFC 9110 §7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// ForwardProxy is a minimal HTTP forward proxy: absolute-form requests are
// forwarded, CONNECT opens a TCP tunnel. It exists so probe tests and
// benchmarks exercise the same two paths a real Squid serves, in-process.
type ForwardProxy struct {
	tunnels *tunnelSet
	// URL is "http://host:port", what a Proxy's ProxyURL would be.
	URL string
	// Addr is the listening host:port.
	Addr string

	group    *ForwardProxyGroup // set for a standalone proxy
	gets     atomic.Int64
	connects atomic.Int64
	conns    atomic.Int64
}

// ForwardProxyGroup serves many ForwardProxies with one http.Server and one
// upstream transport, as the benchmark's fleet does.
type ForwardProxyGroup struct {
	srv       *http.Server
	transport *http.Transport
	proxies   []*ForwardProxy
	wg        sync.WaitGroup
	tunnels   *tunnelSet
}

// tunnelSet tracks hijacked connections, which http.Server.Close does not
// close, so closing a proxy really cuts its tunnels.
type tunnelSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (s *tunnelSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *tunnelSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *tunnelSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
}

// NewForwardProxy starts one proxy listening on addr (e.g. "127.0.0.1:0").
func NewForwardProxy(addr string) (*ForwardProxy, error) {
	g, err := NewForwardProxyGroup(addr, 1)
	if err != nil {
		return nil, err
	}
	p := g.proxies[0]
	p.group = g
	return p, nil
}

// Close stops a proxy made by NewForwardProxy, closing its listener and
// every connection (tunnels included). Proxies of a group close with it.
func (p *ForwardProxy) Close() error {
	if p.group == nil {
		return nil
	}
	return p.group.Close()
}

// Gets counts forwarded plain requests; Connects counts CONNECT tunnels.
func (p *ForwardProxy) Gets() int64 { return p.gets.Load() }

// Connects counts CONNECT tunnels opened.
func (p *ForwardProxy) Connects() int64 { return p.connects.Load() }

// Conns counts client connections accepted.
func (p *ForwardProxy) Conns() int64 { return p.conns.Load() }

// NewForwardProxyGroup starts n proxies, each on its own listener bound to
// host:0 (host is an address like "127.0.0.1"; a port in it is ignored).
func NewForwardProxyGroup(host string, n int) (*ForwardProxyGroup, error) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	g := &ForwardProxyGroup{
		transport: &http.Transport{
			Proxy:               nil, // never chain to an environment proxy
			DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		},
		tunnels: &tunnelSet{conns: map[net.Conn]struct{}{}},
	}
	listeners := make([]net.Listener, 0, n)
	byLocal := make(map[string]*ForwardProxy, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return nil, fmt.Errorf("listening for forward proxy %d/%d: %w", len(listeners)+1, n, err)
		}
		listeners = append(listeners, l)
		p := &ForwardProxy{Addr: l.Addr().String(), URL: "http://" + l.Addr().String(), tunnels: g.tunnels}
		g.proxies = append(g.proxies, p)
		byLocal[p.Addr] = p
	}
	g.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := byLocal[localAddr(r)]
			if p == nil {
				http.Error(w, "unknown listener", http.StatusInternalServerError)
				return
			}
			p.serve(w, r, g.transport)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			if st != http.StateNew {
				return
			}
			if p := byLocal[c.LocalAddr().String()]; p != nil {
				p.conns.Add(1)
			}
		},
	}
	for _, l := range listeners {
		g.wg.Go(func() { _ = g.srv.Serve(l) })
	}
	return g, nil
}

// Proxies returns the group's proxies.
func (g *ForwardProxyGroup) Proxies() []*ForwardProxy { return g.proxies }

// Close stops every proxy of the group and waits for the accept loops.
func (g *ForwardProxyGroup) Close() error {
	err := g.srv.Close()
	g.tunnels.closeAll()
	g.transport.CloseIdleConnections()
	g.wg.Wait()
	return err
}

func localAddr(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.String()
	}
	return ""
}

func (p *ForwardProxy) serve(w http.ResponseWriter, r *http.Request, tr *http.Transport) {
	if r.Method == http.MethodConnect {
		p.connects.Add(1)
		p.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "this is a forward proxy: absolute-form request URI required", http.StatusBadRequest)
		return
	}
	p.gets.Add(1)
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// tunnel answers CONNECT: dial the target, reply 200, then copy bytes both
// ways until either side closes.
func (p *ForwardProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
	upstream, err := (&net.Dialer{}).DialContext(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		http.Error(w, "connect: "+err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "hijacking unsupported", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if !p.tunnels.add(client) || !p.tunnels.add(upstream) {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	defer p.tunnels.remove(client)
	defer p.tunnels.remove(upstream)
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the client sent after CONNECT may already sit in buf.
		_, _ = io.Copy(upstream, buf)
		closeWrite(upstream)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, upstream)
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
	_ = client.Close()
	_ = upstream.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
