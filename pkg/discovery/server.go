package discovery

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/httpdrain"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// Defaults.
const (
	DefaultAddr            = ":8090"
	DefaultMaxBodyBytes    = 64 << 10
	DefaultMaxWait         = 5 * time.Minute
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultIdentity is the identity of a token given without one: a bare
	// token in the operator's --discovery-token-file, or
	// $PROXY_OPERATOR_DISCOVERY_TOKEN.
	DefaultIdentity = "discovery"
	// AnonymousIdentity is everyone's identity when auth is off.
	AnonymousIdentity = "anonymous"
)

// Options configure a Server.
type Options struct {
	// Addr to listen on (default ":8090").
	Addr string
	// Tokens maps each accepted bearer token to what it stands for (the
	// operator reads them from --discovery-token-file or its Secret). Empty
	// disables auth: the server logs a loud warning at start.
	Tokens Tokens
	// Kubernetes, when set (and Tokens is not empty), authenticates a bearer
	// token that none of Tokens matches: a pod's ServiceAccount token
	// (KubernetesTokens).
	Kubernetes TokenAuthenticator
	// Service is the lease path every lease request goes through (required;
	// its limits bound ttlSeconds and waitSeconds).
	Service *leasing.Service
	// Lister reads the fleet (default: Service.Proxies).
	Lister Lister
	// MaxBodyBytes bounds request bodies (default 64 KiB).
	MaxBodyBytes int64
	// ShutdownTimeout bounds graceful shutdown (default 10s).
	ShutdownTimeout time.Duration
	// Cert is the serving certificate (TLS 1.2+), taken afresh on every
	// handshake; a source that must run to follow changes (the file
	// controller from ServingOptions.ServingCert) is run by Serve. Nil serves
	// plain HTTP, with a loud warning.
	Cert dynamiccertificates.CertKeyContentProvider
}

// Token is what a bearer token stands for.
type Token struct {
	// Identity: its leases are held by leasing.HTTPHolderPrefix+Identity,
	// which is also their default fairness flow, so each identity is a
	// client of its own.
	Identity string
	// Namespaces are the only namespaces the identity may lease in and
	// list proxies of; nil means every namespace.
	Namespaces []string
}

// TokenAuthenticator authenticates a bearer token no configured token
// matches. Errors: ErrUnknownToken (401), *ForbiddenError (403), anything
// else (503: it could not tell now).
type TokenAuthenticator interface {
	Authenticate(ctx context.Context, token string) (Token, error)
}

// Tokens maps each accepted bearer token to what it stands for.
type Tokens map[string]Token

// SingleToken is the Tokens of one token of identity DefaultIdentity, in
// every namespace ("" = auth off).
func SingleToken(token string) Tokens {
	if token == "" {
		return nil
	}
	return Tokens{token: {Identity: DefaultIdentity}}
}

// Server is the discovery HTTP API.
type Server struct {
	opts Options
	// tokens are swapped whole by SetTokens (a reloaded token Secret).
	tokens atomic.Pointer[[]tokenEntry]
	// mux serves the routes and, for anything else, notRouted; routed holds
	// the routes alone, for notRouted to learn the 404 or 405.
	mux, routed *http.ServeMux
	handler     http.Handler
	stopped     chan struct{}
	// buffers hold a request's body, then its answer (*bytes.Buffer): the
	// lease path allocates neither.
	buffers sync.Pool
}

type tokenEntry struct {
	hash [sha256.Size]byte
	Token
}

// New validates opts and builds the handler chain.
func New(opts Options) (*Server, error) {
	if opts.Service == nil {
		return nil, errors.New("discovery server: a leasing Service is required")
	}
	if opts.Lister == nil {
		opts.Lister = listerFunc(opts.Service.Proxies)
	}
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), routed: http.NewServeMux(), stopped: make(chan struct{})}
	entries, err := tokenEntries(opts.Tokens)
	if err != nil {
		return nil, err
	}
	s.tokens.Store(&entries)
	for _, rt := range s.routes() {
		s.mux.HandleFunc(rt.method+" "+rt.path, rt.handler)
		s.routed.HandleFunc(rt.method+" "+rt.path, rt.handler)
	}
	// Whatever no route takes is answered in JSON (notRouted); a route's
	// request costs one lookup.
	s.mux.HandleFunc("/", s.notRouted)
	s.handler = s.wrap(s.mux)
	return s, nil
}

// Handler returns the full handler chain (middleware and routes).
func (s *Server) Handler() http.Handler { return s.handler }

// AuthEnabled reports whether bearer tokens are required.
func (s *Server) AuthEnabled() bool { return len(*s.tokens.Load()) > 0 }

// SetTokens replaces the accepted tokens (each mapped to its identity) from
// the next request on. A server with authentication keeps it: an empty map is
// refused, as is an empty token or identity; the old tokens then stay.
func (s *Server) SetTokens(tokens Tokens) error {
	if len(tokens) == 0 && s.AuthEnabled() {
		return errors.New("discovery server: refusing to replace the tokens with none (that would turn authentication off)")
	}
	entries, err := tokenEntries(tokens)
	if err != nil {
		return err
	}
	s.tokens.Store(&entries)
	return nil
}

func tokenEntries(tokens Tokens) ([]tokenEntry, error) {
	entries := make([]tokenEntry, 0, len(tokens))
	for token, t := range tokens {
		if token == "" || t.Identity == "" {
			return nil, errors.New("discovery server: tokens and identities must not be empty")
		}
		entries = append(entries, tokenEntry{hash: sha256.Sum256([]byte(token)), Token: t})
	}
	return entries, nil
}

// Start listens on Options.Addr and serves until ctx ends (manager Runnable).
func (s *Server) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("discovery server: listening on %s: %w", s.opts.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer close(s.stopped)
	logger := log.FromContext(ctx).WithName("discovery")
	ctx = log.IntoContext(ctx, logger)
	if !s.AuthEnabled() {
		logger.Info("WARNING: discovery API authentication is DISABLED (no token configured): anyone who can reach this address can lease proxies",
			"address", ln.Addr().String())
	}
	if s.opts.Cert == nil {
		logger.Info("WARNING: discovery API serves plain HTTP (--discovery-plain-http): bearer tokens cross the network unencrypted",
			"address", ln.Addr().String())
	}
	unused := httpdrain.New(time.Now)
	srv := &http.Server{
		Handler:           s.handler,
		ConnState:         unused.ConnState,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A waiting acquire holds its response for up to MaxWait.
		WriteTimeout:   s.opts.Service.Limits().MaxWait + 30*time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 32 << 10,
		BaseContext:    func(net.Listener) context.Context { return ctx },
	}
	serve := srv.Serve
	if s.opts.Cert != nil {
		if r, ok := s.opts.Cert.(certRunner); ok {
			go r.Run(ctx, 1)
		}
		srv.TLSConfig = newServingTLS(s.opts.Cert).config()
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	errCh := make(chan error, 1)
	go func() { errCh <- serve(ln) }()
	logger.Info("discovery API serving", "address", ln.Addr().String(), "auth", s.AuthEnabled(), "tls", s.opts.Cert != nil,
		"identities", Identities(s.opts.Tokens))
	select {
	case err := <-errCh:
		return fmt.Errorf("discovery server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	stopping := time.Now()
	if err := unused.Shutdown(shutdownCtx, srv); err != nil {
		_ = srv.Close()
		return fmt.Errorf("discovery server: shutting down: %w", err)
	}
	// How long a handover waited for this server's connections.
	logger.Info("discovery API stopped", "shutdownMillis", time.Since(stopping).Milliseconds())
	return nil
}

// Stopped is closed once Serve has returned: the API takes no more requests
// and those in flight have been answered (or the shutdown timed out).
func (s *Server) Stopped() <-chan struct{} { return s.stopped }

// NeedLeaderElection is false: every replica listens; the lease Gate decides
// which serves leases (a standby answers 503 not_leader).
func (s *Server) NeedLeaderElection() bool { return false }

type route struct {
	method, path string
	handler      http.HandlerFunc
}

// routes is the one list of endpoints: the mux is built from it and the
// OpenAPI test compares it with openapi.json.
func (s *Server) routes() []route {
	return []route{
		{http.MethodGet, "/healthz", s.healthz},
		{http.MethodGet, "/openapi.json", s.openAPI},
		{http.MethodGet, "/v1/proxies", s.listProxies},
		{http.MethodPost, "/v1/leases", s.acquire},
		{http.MethodGet, "/v1/leases/{id}", s.getLease},
		{http.MethodDelete, "/v1/leases/{id}", s.release},
		{http.MethodPost, "/v1/leases/{id}/report", s.report},
		{http.MethodPost, "/v1/leases/{id}/renew", s.renew},
		{http.MethodGet, proxyauth.LivePath, s.liveList},
	}
}

// notRouted answers in JSON what no route takes. The mux of the routes
// alone (routed) would answer 404 or 405 in plain text: learn its status
// and Allow header from it.
func (s *Server) notRouted(w http.ResponseWriter, r *http.Request) {
	h, _ := s.routed.Handler(r)
	probe := &headerProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	switch probe.status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", probe.header.Get("Allow"))
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
			fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, probe.header.Get("Allow")))
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		h.ServeHTTP(w, r)
	default:
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	}
}

type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
func (p *headerProbe) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}
