package proxyauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// SweepInterval is how often a Relay ends the traffic of leases that are no
// longer live. With PollInterval and the poll's timeout, a released lease's
// tunnels and requests end within 20 seconds.
const SweepInterval = 5 * time.Second

// Relay stands behind Squid: Squid sends every request it accepted to it
// (its one cache_peer, with login=PASSTHRU so that each request keeps its
// credentials), and it reaches the destination. It runs from before Squid
// starts (RunRelay): Squid counts a parent that refused its first probe as
// down until a request makes it probe again, which would fail that request. Squid cannot end a
// lease's traffic: a CONNECT tunnel it accepted relays until either side
// closes, or for client_lifetime (a day), whoever holds the proxy since. The
// relay ties each tunnel and request to the credential it came with, and
// Sweep ends those whose lease is no longer live, as the verifier sees it.
// It also dials under the proxy's Egress, on the address it connects to, so
// that a name resolving inside between Squid's check and the dial is
// refused too.
//
// Only Squid reaches it: it listens on loopback, inside the pod or the VM,
// and takes only credentials its Verifier accepts.
type Relay struct {
	v      *Verifier
	egress Egress
	clock  clock.WithTicker
	proxy  *httputil.ReverseProxy

	mu    sync.Mutex
	flows map[*flow]struct{}
}

// flow is one tunnel or request in flight, and how to end it.
type flow struct {
	cred credential
	end  context.CancelFunc
}

// NewRelay returns the relay of v's proxy under e; a nil clock is the real
// one.
func NewRelay(v *Verifier, e Egress, clk clock.WithTicker) *Relay {
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &Relay{v: v, egress: e, clock: clk, flows: map[*flow]struct{}{}}
	r.proxy = &httputil.ReverseProxy{
		// The request goes where its absolute URL says; Rewrite drops the
		// hop-by-hop headers (Proxy-Authorization too) and X-Forwarded-*.
		Rewrite: func(*httputil.ProxyRequest) {},
		Transport: &http.Transport{
			DialContext:           r.dialer(false).DialContext,
			Proxy:                 nil,
			MaxIdleConns:          64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) { refuse(w, err) },
	}
	return r
}

// dialer connects where a lease's traffic may go: connect for tunnels, else
// plain HTTP.
func (r *Relay) dialer(connect bool) *net.Dialer {
	return &net.Dialer{
		Timeout: 30 * time.Second,
		// Called with the address being dialled, after resolution.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			return r.egress.Permits(ap, connect)
		},
	}
}

// refuse answers a request the relay could not take to its destination.
func refuse(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	switch {
	case IsEgressRefused(err):
		code = http.StatusForbidden
	case errors.Is(err, context.Canceled):
		// Its lease ended (Sweep) before an answer came.
		code = http.StatusProxyAuthRequired
	}
	http.Error(w, "proxy-operator relay: "+err.Error(), code)
}

// ServeHTTP takes one request from Squid: a CONNECT, or a request in
// absolute form.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	cred, err := r.credential(req)
	if err != nil {
		w.Header().Set("Proxy-Authenticate", `Basic realm="proxy-operator"`)
		http.Error(w, "proxy-operator relay: "+err.Error(), http.StatusProxyAuthRequired)
		return
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	f := &flow{cred: cred, end: cancel}
	r.mu.Lock()
	r.flows[f] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.flows, f)
		r.mu.Unlock()
	}()
	switch {
	case req.Method == http.MethodConnect:
		r.tunnel(ctx, w, req)
	case !req.URL.IsAbs():
		http.Error(w, "proxy-operator relay: want a request in absolute form or CONNECT", http.StatusBadRequest)
	default:
		r.proxy.ServeHTTP(w, req.WithContext(ctx))
	}
}

// credential is the request's Proxy-Authorization, checked as Squid's
// helper checks it.
func (r *Relay) credential(req *http.Request) (credential, error) {
	scheme, encoded, ok := strings.Cut(req.Header.Get("Proxy-Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return credential{}, errors.New("no Basic proxy credentials")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return credential{}, ErrMalformed
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok {
		return credential{}, ErrMalformed
	}
	return r.v.verify(user, pass)
}

// tunnel connects to the CONNECT's authority and relays bytes both ways
// until either side closes or ctx ends (the lease did).
func (r *Relay) tunnel(ctx context.Context, w http.ResponseWriter, req *http.Request) {
	up, err := r.dialer(true).DialContext(ctx, "tcp", req.Host)
	if err != nil {
		refuse(w, err)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "proxy-operator relay: CONNECT needs HTTP/1.1", http.StatusBadRequest)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() {
		_ = conn.Close()
		_ = up.Close()
	})
	defer stop()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(conn, up)
	}()
	copyHalf(up, conn)
	<-done
}

// copyHalf copies src to dst until src ends, then closes dst's write side.
func copyHalf(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// Sweep ends the tunnels and requests whose lease is no longer live, and
// returns how many it ended.
func (r *Relay) Sweep() int {
	var due []*flow
	r.mu.Lock()
	for f := range r.flows {
		if !r.v.live(f.cred) {
			due = append(due, f)
			delete(r.flows, f)
		}
	}
	r.mu.Unlock()
	for _, f := range due {
		f.end()
	}
	return len(due)
}

// InFlight is how many tunnels and requests the relay carries.
func (r *Relay) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.flows)
}

// Run sweeps every SweepInterval until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	every(ctx, r.clock, SweepInterval, func() { r.Sweep() })
}

// Listen binds addr for Serve. An address still held (a relay restarting
// beside the one it replaces) is retried every second until ctx ends.
func (r *Relay) Listen(ctx context.Context, addr string, logf func(string, ...any)) (net.Listener, error) {
	for attempt := 0; ; attempt++ {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err == nil {
			return ln, nil
		}
		if attempt == 0 {
			logf("proxy-auth-helper: relay: %v; retrying every second", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.clock.After(time.Second):
		}
	}
}

// Serve relays what ln accepts until ctx ends, then ends every tunnel.
func (r *Relay) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           r,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Every request's context ends with ctx: so do its tunnels.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("relay on %s: %w", ln.Addr(), err)
	}
	return nil
}
