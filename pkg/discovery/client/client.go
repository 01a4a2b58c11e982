package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// Client talks to one discovery server. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	token     string
	hc        *http.Client
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces http.DefaultClient (timeouts, TLS, transport).
// Keep any client timeout above the longest waitSeconds you use.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRootCAs verifies an https:// API against roots (for example the
// operator's CA: the ConfigMap proxy-operator-ca in a cluster, .dev/ca.crt
// with make dev) instead of the system's, over TLS 1.2 or later. It replaces
// the HTTP client, so give WithHTTPClient instead when you need both.
func WithRootCAs(roots *x509.CertPool) Option {
	return func(c *Client) {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		c.hc = &http.Client{Transport: t}
	}
}

// LoadCAFile reads a PEM CA bundle for WithRootCAs.
func LoadCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("discovery client: reading CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("discovery client: %s holds no PEM certificate", path)
	}
	return pool, nil
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client for baseURL (e.g. "http://proxy-operator:8090"); an
// empty token sends no Authorization header.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("discovery client: base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("discovery client: base URL %q must be http(s)://host[:port]", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, token: token, hc: http.DefaultClient, userAgent: "proxy-operator-discovery-client"}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// NoMatch carries the counts of a no_match answer:
// Considered = AtCapacity + InCooldown + Unhealthy + Free. QueuedAhead
// counts this flow's earlier requests for the same target and selector
// that wait ahead (they, not the fleet, kept the request from Free proxies).
type NoMatch struct {
	Considered, AtCapacity, InCooldown, Unhealthy, Free, QueuedAhead int
	// SitePolicy names the SitePolicy whose budget for the target's site
	// is in use ("" if none held the request back).
	SitePolicy string
	// Tier is the tier of the request's selectors the counts are of (0:
	// the first; past it, every proxy of the tiers before cools for the
	// target).
	Tier int
}

// APIError is any non-success answer.
type APIError struct {
	StatusCode int
	// Code is the "error" field (wire.Code…), "" if the body was not JSON.
	Code    string
	Message string
	// RetryAfter is the Retry-After header of a 429.
	RetryAfter time.Duration
	// NoMatch is set for no_match.
	NoMatch *NoMatch
	// MaxTTLSeconds is set for ttl_too_long.
	MaxTTLSeconds int64
	// Leader is set for not_leader: the replica that serves leases (retry
	// after RetryAfter; a Service routes to it).
	Leader string
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("discovery API: HTTP %d: %s", e.StatusCode, e.Message)
	}
	return fmt.Sprintf("discovery API: HTTP %d %s: %s", e.StatusCode, e.Code, e.Message)
}

func hasCode(err error, code string) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}

// IsNoMatch: no proxy could take the lease (409); see APIError.NoMatch.
func IsNoMatch(err error) bool { return hasCode(err, wire.CodeNoMatch) }

// IsUnknownLease: no such lease (404).
func IsUnknownLease(err error) bool { return hasCode(err, wire.CodeUnknownLease) }

// IsLeaseEnded: renew of a released or expired lease (410).
func IsLeaseEnded(err error) bool { return hasCode(err, wire.CodeLeaseEnded) }

// IsUnauthorized: missing or wrong token (401).
func IsUnauthorized(err error) bool { return hasCode(err, wire.CodeUnauthorized) }

// IsForbidden: 403 forbidden, the lease is another identity's.
func IsForbidden(err error) bool { return hasCode(err, wire.CodeForbidden) }

// IsTTLTooLong: ttlSeconds over the server maximum (400); see APIError.MaxTTLSeconds.
func IsTTLTooLong(err error) bool { return hasCode(err, wire.CodeTTLTooLong) }

// IsInvalidResult: report result not ok, rate_limited or banned (400).
func IsInvalidResult(err error) bool { return hasCode(err, wire.CodeInvalidResult) }

// IsNoRoom reports a 409 no_room: a lease lost in an operator crash could
// not be taken back (its proxy is full); acquire a new one.
func IsNoRoom(err error) bool { return hasCode(err, wire.CodeNoRoom) }

// IsNotLeader reports a 503 not_leader: this replica is a standby.
func IsNotLeader(err error) bool { return hasCode(err, wire.CodeNotLeader) }

// IsQueueFull reports a 429 and how long to wait before retrying.
func IsQueueFull(err error) (retryAfter time.Duration, ok bool) {
	var e *APIError
	if errors.As(err, &e) && e.Code == wire.CodeQueueFull {
		return e.RetryAfter, true
	}
	return 0, false
}

// ListOptions filter ListProxies.
type ListOptions struct {
	// Selector: attr.<name>=<value> filters, all must match.
	Selector map[string]string
	// Namespace: only this namespace when set.
	Namespace string
	// Healthy: only healthy (true) or unhealthy (false) proxies when set.
	Healthy *bool
}

// ListProxies lists proxies with their health and active lease counts.
func (c *Client) ListProxies(ctx context.Context, opts ListOptions) ([]wire.ListedProxy, error) {
	q := url.Values{}
	for k, v := range opts.Selector {
		q.Set("attr."+k, v)
	}
	if opts.Namespace != "" {
		q.Set("namespace", opts.Namespace)
	}
	if opts.Healthy != nil {
		q.Set("healthy", strconv.FormatBool(*opts.Healthy))
	}
	var out wire.ProxyList
	if err := c.do(ctx, http.MethodGet, "/v1/proxies", q, nil, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return out.Proxies, nil
}

// Acquire leases a proxy. With req.WaitSeconds > 0 the call may block that
// long (bound it with ctx, not a shorter HTTP client timeout).
func (c *Client) Acquire(ctx context.Context, req wire.AcquireRequest) (*wire.Lease, error) {
	var out wire.Lease
	if err := c.do(ctx, http.MethodPost, "/v1/leases", nil, req, http.StatusCreated, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Release ends a lease; releasing an unknown or ended lease is not an error.
func (c *Client) Release(ctx context.Context, leaseID string) error {
	return c.do(ctx, http.MethodDelete, "/v1/leases/"+url.PathEscape(leaseID), nil, nil, http.StatusNoContent, nil)
}

// Get shows one of the caller's leases as it is now (its proxy's current
// address and health). A lease that ended is IsLeaseEnded, its message
// saying why.
func (c *Client) Get(ctx context.Context, leaseID string) (*wire.Lease, error) {
	var out wire.Lease
	if err := c.do(ctx, http.MethodGet, "/v1/leases/"+url.PathEscape(leaseID), nil, nil, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetFor is Get answering also whether the lease's proxy cools for target
// (wire.Lease.CoolingUntil set while it does): ask before using a lease for
// a site other than the one it was granted for.
func (c *Client) GetFor(ctx context.Context, leaseID, target string) (*wire.Lease, error) {
	var out wire.Lease
	q := url.Values{"target": {target}}
	if err := c.do(ctx, http.MethodGet, "/v1/leases/"+url.PathEscape(leaseID), q, nil, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Report tells the server how requests through the leased proxy went
// (wire.ResultOK, ResultRateLimited, ResultBanned); target "" = the lease's.
func (c *Client) Report(ctx context.Context, leaseID, result, target string) error {
	return c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(leaseID)+"/report", nil,
		wire.ReportRequest{Result: result, Target: target}, http.StatusNoContent, nil)
}

// Renew extends a lease to ttl from now (0 = its current TTL; whole seconds).
func (c *Client) Renew(ctx context.Context, leaseID string, ttl time.Duration) (*wire.Lease, error) {
	var out wire.Lease
	if err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(leaseID)+"/renew", nil,
		wire.RenewRequest{TTLSeconds: int64(ttl / time.Second)}, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) do(ctx context.Context, method, path string, query url.Values, body any, want int, out any) error {
	// path is already escaped (IDs go through url.PathEscape): set RawPath so
	// an escaped "/" in an ID is not escaped twice.
	u := *c.base
	u.RawPath = c.base.EscapedPath() + path
	unescaped, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return fmt.Errorf("discovery client: path %q: %w", u.RawPath, err)
	}
	u.Path = unescaped
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("discovery client: encoding %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return fmt.Errorf("discovery client: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("discovery client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("discovery client: reading %s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return apiError(resp, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("discovery client: decoding %s %s: %w", method, path, err)
	}
	return nil
}

func apiError(resp *http.Response, data []byte) *APIError {
	var body wire.Error
	if err := json.Unmarshal(data, &body); err != nil || body.Error == "" {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		return &APIError{StatusCode: resp.StatusCode, Message: msg}
	}
	var retryAfter time.Duration
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(s); err == nil && secs >= 0 {
			retryAfter = time.Duration(secs) * time.Second
		}
	}
	return ErrorOf(resp.StatusCode, body, retryAfter)
}

// ErrorOf is the APIError of an answer with status, body and Retry-After:
// what the client returns for it, and what a caller of the API in the
// server's own process gets (pkg/discovery.InProcess).
func ErrorOf(status int, body wire.Error, retryAfter time.Duration) *APIError {
	e := &APIError{StatusCode: status, Code: body.Error, Message: body.Message, Leader: body.Leader, RetryAfter: retryAfter}
	if body.Error == wire.CodeNoMatch {
		e.NoMatch = &NoMatch{Considered: deref(body.Considered), AtCapacity: deref(body.AtCapacity),
			InCooldown: deref(body.InCooldown), Unhealthy: deref(body.Unhealthy),
			Free: deref(body.Free), QueuedAhead: deref(body.QueuedAhead), SitePolicy: body.SitePolicy, Tier: body.Tier}
	}
	if body.MaxTTLSeconds != nil {
		e.MaxTTLSeconds = *body.MaxTTLSeconds
	}
	return e
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
