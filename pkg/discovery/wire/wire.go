package wire

import "time"

// Error codes: the "error" field of every error body.
const (
	// 400: the body is not one JSON object of the documented shape (syntax,
	// unknown field, wrong type, trailing data).
	CodeInvalidJSON = "invalid_json"
	// 400: a field has a value outside its rules (message names the field).
	CodeInvalidRequest = "invalid_request"
	// 400: ttlSeconds over the server's --max-lease-ttl (maxTtlSeconds says the maximum).
	CodeTTLTooLong = "ttl_too_long"
	// 400: report result other than ok, rate_limited, banned.
	CodeInvalidResult = "invalid_result"
	// 400: unknown or malformed query parameter.
	CodeInvalidQuery = "invalid_query"
	// 401: missing or wrong bearer token.
	CodeUnauthorized = "unauthorized"
	// 403: the lease is held by another identity (release, report, renew).
	CodeForbidden = "forbidden"
	// 404: no such route.
	CodeNotFound = "not_found"
	// 405: the route exists, the method does not (Allow header lists them).
	CodeMethodNotAllowed = "method_not_allowed"
	// 404: no live lease (nor one that ended within the report window) has this ID.
	CodeUnknownLease = "unknown_lease"
	// 410: renew of a lease that was released or expired.
	CodeLeaseEnded = "lease_ended"
	// 409: no proxy can take the lease (body carries the counts).
	CodeNoMatch = "no_match"
	// 409: a lease lost in an operator crash cannot be taken back: its
	// proxy has been leased to capacity since.
	CodeNoRoom = "no_room"
	// 413: body over 64 KiB.
	CodeBodyTooLarge = "body_too_large"
	// 429: the wait queue is full (Retry-After header).
	CodeQueueFull = "queue_full"
	// 403: the report would start a cooldown while the lease's holder
	// already runs as many as one holder may; it changed nothing. Retry once
	// one of them ends (at most a cooldown window).
	CodeCooldownLimit = "cooldown_limit"
	// 503: the server cannot answer now (proxy cache not ready, shutting down).
	CodeUnavailable = "unavailable"
	// 503: this replica is a standby (Retry-After header); leader names the
	// replica that serves leases.
	CodeNotLeader = "not_leader"
	// 500: a bug; the request may be retried.
	CodeInternal = "internal"
)

// Report results.
const (
	ResultOK          = "ok"
	ResultRateLimited = "rate_limited"
	ResultBanned      = "banned"
)

// Error is every error body. The count fields are set only for no_match
// (considered = atCapacity + inCooldown + unhealthy + free; queuedAhead
// counts the caller's own earlier requests for the same target and
// selector that wait ahead and kept it from the free ones; sitePolicy
// names the SitePolicy whose site budget is in use, whatever the counts;
// tier, for a request with selectors, the tier of its ladder the counts are
// of, when past the first: every proxy of the tiers before cools for the
// target),
// maxTtlSeconds only for ttl_too_long, leader only for not_leader.
type Error struct {
	Error         string `json:"error"`
	Message       string `json:"message"`
	Considered    *int   `json:"considered,omitempty"`
	AtCapacity    *int   `json:"atCapacity,omitempty"`
	InCooldown    *int   `json:"inCooldown,omitempty"`
	Unhealthy     *int   `json:"unhealthy,omitempty"`
	Free          *int   `json:"free,omitempty"`
	QueuedAhead   *int   `json:"queuedAhead,omitempty"`
	SitePolicy    string `json:"sitePolicy,omitempty"`
	Tier          int    `json:"tier,omitempty"`
	MaxTTLSeconds *int64 `json:"maxTtlSeconds,omitempty"`
	Leader        string `json:"leader,omitempty"`
}

// AcquireRequest is the body of POST /v1/leases. Every field is optional.
type AcquireRequest struct {
	// Selector: every pair must be among the proxy's attributes.
	Selector map[string]string `json:"selector,omitempty"`
	// Selectors, instead of selector: a ladder of proxy tiers, cheapest
	// first (at most 4). The lease is granted on the first tier that can
	// serve the target and climbs to the next only when every proxy of a
	// tier cools for it (or none is healthy); Lease.Tier says which.
	Selectors []map[string]string `json:"selectors,omitempty"`
	// Namespace of the Proxies to choose from; "" = any namespace.
	Namespace string `json:"namespace,omitempty"`
	// Target site; proxies cooling down for it are skipped.
	Target string `json:"target,omitempty"`
	// TTLSeconds: 0 = the server default; over the maximum is a 400.
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
	// WaitSeconds > 0 queues the request until a proxy frees up or the wait ends.
	WaitSeconds int64 `json:"waitSeconds,omitempty"`
	// Flow groups requests for fairness; default: the token's identity.
	Flow string `json:"flow,omitempty"`
	// Priority band of a waiting request (higher first).
	Priority int32 `json:"priority,omitempty"`
}

// ReportRequest is the body of POST /v1/leases/{id}/report.
type ReportRequest struct {
	Result string `json:"result"`
	// Target defaults to the lease's target, then to every target.
	Target string `json:"target,omitempty"`
}

// RenewRequest is the body of POST /v1/leases/{id}/renew (may be empty).
type RenewRequest struct {
	// TTLSeconds: the new lease runs this long from now; 0 = the lease's TTL.
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
}

// Proxy is a leased proxy.
type Proxy struct {
	Name          string            `json:"name"`
	Namespace     string            `json:"namespace"`
	URL           string            `json:"url"`
	Host          string            `json:"host"`
	Port          int32             `json:"port"`
	Attributes    map[string]string `json:"attributes,omitempty"`
	LatencyMillis int64             `json:"latencyMillis"`
}

// ListedProxy is one entry of GET /v1/proxies.
type ListedProxy struct {
	Proxy
	Healthy      bool `json:"healthy"`
	ActiveLeases int  `json:"activeLeases"`
}

// ProxyList is the body of GET /v1/proxies.
type ProxyList struct {
	Proxies []ListedProxy `json:"proxies"`
	Count   int           `json:"count"`
}

// Lease is the body of a granted (201) or renewed (200) lease.
type Lease struct {
	LeaseID string `json:"leaseID"`
	// Proxy is where the leased proxy is now: a replaced instance's new
	// address shows here (GET /v1/leases/{id}).
	Proxy Proxy `json:"proxy"`
	// ProxyHealthy is false while the leased proxy fails its health probes.
	ProxyHealthy bool `json:"proxyHealthy"`
	// ProxyDraining is true while the proxy's ProxyPool removes it: the
	// lease lasts until released (or the drain timeout); move when you can.
	ProxyDraining bool      `json:"proxyDraining,omitempty"`
	ExpiresAt     time.Time `json:"expiresAt"`
	TTLSeconds    int64     `json:"ttlSeconds"`
	// Tier is the tier of the request's selectors the lease was granted on
	// (0, omitted: the first, or a request without a ladder).
	Tier int `json:"tier,omitempty"`
	// Credentials are what the proxy asks for (HTTP Basic in
	// Proxy-Authorization; Proxy.URL carries them as userinfo). A renewal
	// answers new ones. Absent for an External proxy, which checks none.
	Credentials *Credentials `json:"credentials,omitempty"`
	// CoolingUntil answers GET /v1/leases/{id}?target=T: set while the
	// lease's proxy cools for T (reported rate_limited or banned for it, by
	// any lease on it), when that ends. A lease is checked against cooldowns
	// for its own target only when granted; a client about to use it for
	// another site asks first.
	CoolingUntil *time.Time `json:"coolingUntil,omitempty"`
}

// Credentials are a lease's proxy credentials.
type Credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// ExpiresAt is when the proxy stops accepting them (the lease's expiry
	// when they were issued, to the second).
	ExpiresAt time.Time `json:"expiresAt"`
}

// Health is the body of GET /healthz.
type Health struct {
	Status string `json:"status"`
}
