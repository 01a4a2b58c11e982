package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
	"github.com/proxy-operator/proxy-operator/pkg/httpdrain"
)

// LeaseIDHeader carries the ID of the lease a request or tunnel went
// through, so that a client can report through either lease API.
const LeaseIDHeader = "X-Proxy-Lease-ID"

// Request kinds and outcomes of Recorder.Request.
const (
	KindHTTP    = "http"
	KindConnect = "connect"
	OutcomeOK   = "ok"
)

// Kinds are every kind label value.
func Kinds() []string { return []string{KindHTTP, KindConnect} }

// Outcomes are every outcome label value.
func Outcomes() []string {
	return []string{OutcomeOK, ReasonUnauthorized, ReasonInvalid, ReasonForbidden, ReasonBusy, ReasonUnavailable, ReasonUpstream}
}

// Recorder counts what the gateway serves; pkg/metrics implements it. It
// must not block.
type Recorder interface {
	// GatewayRequest counts one request of kind (KindHTTP, KindConnect)
	// by outcome (OutcomeOK or a Reason).
	GatewayRequest(kind, outcome string)
	// GatewayBytes counts bytes relayed, direction "up" (client to site)
	// or "down".
	GatewayBytes(direction string, n int64)
	// GatewayTunnels moves the number of open tunnels by delta.
	GatewayTunnels(delta int)
}

type nopRecorder struct{}

func (nopRecorder) GatewayRequest(string, string) {}
func (nopRecorder) GatewayBytes(string, int64)    {}
func (nopRecorder) GatewayTunnels(int)            {}

// Gateway is the forward proxy. It is an http.Handler and a manager
// Runnable that every replica runs.
type Gateway struct {
	opts      Options
	leases    *leases
	rec       Recorder
	clock     clock.WithTicker
	transport *http.Transport
	dialer    net.Dialer
	// relay moves tunnels' bytes.
	relay *relayer
	// warm are connections dialled ahead to proxies.
	warm *warmConns

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
}

// Deps are what a Gateway runs on.
type Deps struct {
	// Leaser leases for the clients (required).
	Leaser Leaser
	// Recorder counts (optional).
	Recorder Recorder
	// Clock drives renewals and idle sessions (default: real).
	Clock clock.WithTicker
	// Denied are the addresses the gateway never dials, whatever a
	// lease's proxy address says (the operator's one dial policy, which
	// its probes obey too): checked on the address actually dialled.
	Denied dialpolicy.Denylist
}

// New returns the gateway of o.
func New(o Options, d Deps) (*Gateway, error) {
	if d.Leaser == nil {
		return nil, errors.New("gateway: a Leaser is required")
	}
	if d.Recorder == nil {
		d.Recorder = nopRecorder{}
	}
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
	g := &Gateway{opts: o, rec: d.Recorder, clock: d.Clock, tunnels: map[net.Conn]struct{}{}, relay: newRelayer(),
		dialer: net.Dialer{Timeout: o.DialTimeout, Control: d.Denied.Control}}
	g.leases = newLeases(d.Leaser, &g.opts, d.Clock.Now)
	g.warm = newWarmConns(func(ctx context.Context, addr string) (net.Conn, error) {
		return g.dialer.DialContext(ctx, "tcp", addr)
	}, d.Clock.Now)
	g.transport = &http.Transport{
		Proxy:                 proxyFromContext,
		DialContext:           g.dialer.DialContext,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		DisableCompression:    true,
	}
	return g, nil
}

// ServeHTTP serves one request: a CONNECT tunnel or a plain HTTP request in
// absolute form.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := KindHTTP
	if r.Method == http.MethodConnect {
		kind = KindConnect
	}
	token, username, ok := proxyCredentials(r)
	if !ok {
		g.fail(w, kind, &Error{Reason: ReasonUnauthorized, Message: "send your lease API token as the password of Proxy-Authorization (Basic), e.g. http://session-abc:TOKEN@gateway"}, "")
		return
	}
	opts, err := ParseUsername(username)
	if err != nil {
		g.fail(w, kind, &Error{Reason: ReasonInvalid, Message: err.Error()}, "")
		return
	}
	if kind == KindConnect {
		g.tunnel(w, r, token, username, opts)
		return
	}
	g.forward(w, r, token, username, opts)
}

func (g *Gateway) fail(w http.ResponseWriter, kind string, err *Error, leaseID string) {
	g.rec.GatewayRequest(kind, err.Reason)
	writeError(w, err, leaseID)
}

// proxyCredentials reads Basic Proxy-Authorization: the password is the
// token, the username the options.
func proxyCredentials(r *http.Request) (token, username string, ok bool) {
	scheme, value, found := strings.Cut(r.Header.Get("Proxy-Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil {
		return "", "", false
	}
	username, token, found = strings.Cut(string(raw), ":")
	return token, username, found && token != ""
}

// hostOf is the site of an authority ("host:port"), the lease's target.
func hostOf(authority string) string {
	if h, _, err := net.SplitHostPort(authority); err == nil {
		return strings.ToLower(h)
	}
	return strings.ToLower(strings.Trim(authority, "[]"))
}

// reportStatus reports whether an origin status is reported rate_limited.
func (g *Gateway) reportStatus(code int) bool { return slices.Contains(g.opts.ReportStatuses, code) }

// reportRateLimited reports (h's proxy, host) rate limited and makes its
// session move for host, once the report is applied.
func (g *Gateway) reportRateLimited(ctx context.Context, h *holding, host string) {
	defer g.leases.cool(h, host)()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.APITimeout)
	defer cancel()
	if err := g.leases.leaser.Report(rctx, h.token, h.id, "rate_limited", host); err != nil {
		log.FromContext(ctx).Info("gateway: reporting rate_limited failed", "lease", h.id, "host", host, "err", err.Error())
	}
}

// Start serves on opts.Addr until ctx ends, renewing leases and ending idle
// sessions; at the end it closes every tunnel and releases every lease.
func (g *Gateway) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.opts.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listening on %s: %w", g.opts.Addr, err)
	}
	return g.Serve(ctx, ln)
}

// Serve is Start on a listener of the caller's.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	// Clients' spare connections (dialed, never used) would hold the
	// shutdown, and so a handover, for net/http's 5 s: the tracker closes them.
	unused := httpdrain.New(time.Now)
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, IdleTimeout: g.opts.IdleTimeout,
		ConnState: unused.ConnState, BaseContext: func(net.Listener) context.Context { return ctx }, ConnContext: withSourceConn}
	ln = (&sourceLimit{max: g.opts.MaxUnauthenticatedPerSource, pending: map[string]int{}}).listen(ln)
	log.FromContext(ctx).Info("gateway serving", "addr", ln.Addr().String(), "leaseAPI", g.opts.LeaseAPIURL)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	ticker := g.clock.NewTicker(g.opts.tickEvery())
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C():
			g.leases.tick(ctx)
			g.warm.expire()
		case err := <-errc:
			g.closeAll()
			return fmt.Errorf("gateway: %w", err)
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = unused.Shutdown(sctx, srv)
			cancel()
			g.closeAll()
			return nil
		}
	}
}

// NeedLeaderElection: every replica serves the gateway.
func (g *Gateway) NeedLeaderElection() bool { return false }

func (g *Gateway) closeAll() {
	g.mu.Lock()
	for c := range g.tunnels {
		_ = c.Close()
	}
	g.mu.Unlock()
	g.transport.CloseIdleConnections()
	g.relay.close()
	g.warm.close()
	g.leases.releaseAll()
}

func (g *Gateway) track(c net.Conn, add bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if add {
		g.tunnels[c] = struct{}{}
	} else {
		delete(g.tunnels, c)
	}
}
