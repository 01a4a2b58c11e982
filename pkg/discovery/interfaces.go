package discovery

import (
	"context"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Leaser is the part of the lease store the handlers use; *lease.Store
// implements it.
type Leaser interface {
	// Acquire grants a lease now (only without a Waiter) or fails with a *lease.NoMatchError
	// (lease.IsNoMatch), a *lease.TTLError or lease.ErrNegativeTTL.
	Acquire(req lease.AcquireRequest) (*lease.Lease, error)
	// GetAs returns a live lease of holder; errors: *lease.NotHolderError,
	// lease.ErrLeaseEnded (with lease.EndReason), lease.ErrUnknownLease.
	GetAs(holder, id string) (lease.Lease, error)
	// ReleaseAs ends a lease of holder; another holder's live lease stays
	// and the error is a *lease.NotHolderError.
	ReleaseAs(holder, id string) (bool, error)
	// ReportAs records a result on a lease of holder; errors:
	// lease.ErrInvalidResult, lease.ErrUnknownLease, *lease.NotHolderError.
	ReportAs(holder, id, result, target string) error
	// RenewAs extends a lease of holder to ttl from now (0 = its TTL);
	// errors: *lease.TTLError, lease.ErrNegativeTTL, lease.ErrLeaseEnded,
	// lease.ErrUnknownLease, *lease.NotHolderError.
	RenewAs(holder, id string, ttl time.Duration) (*lease.Lease, error)
	// Counts returns live leases per proxy.
	Counts() map[lease.ProxyKey]int
	// MaxTTL is the longest TTL Acquire and Renew accept (--max-lease-ttl).
	MaxTTL() time.Duration
}

var _ Leaser = (*lease.Store)(nil)

// Lister reads the fleet; *lease.Store implements it (it is fed from the
// manager cache), and CacheLister reads the cache directly.
type Lister interface {
	// ListProxies returns the proxies of namespace ("" = every namespace).
	// An error means the fleet cannot be read now (the server answers 503).
	ListProxies(ctx context.Context, namespace string) ([]lease.ProxyInfo, error)
}

var _ Lister = (*lease.Store)(nil)

// Waiter is the lease path of POST /v1/leases: every request goes through
// it, one without a wait with a deadline of now (*leasing.Door implements
// it, over the wait queue; it counts every outcome and gives back a grant
// whose caller left). Without a Waiter (tests) requests go to the Leaser
// directly and nothing is counted.
type Waiter interface {
	// Invalid counts a request refused as malformed before it reached the
	// queue.
	Invalid()
	// Wait returns a lease for req, granted now or when capacity appears
	// before deadline. priority picks the band (higher first); req.Flow is the
	// fairness flow. Errors, which decide the HTTP answer:
	//   - the deadline passed: an error for which lease.IsNoMatch is true,
	//     ideally a *lease.NoMatchError with the store's counts → 409;
	//   - rejected without queueing (a queue limit): an error with a method
	//     RetryAfter() time.Duration → 429 with Retry-After;
	//   - ctx ended: ctx.Err(), wrapped; no lease may be left behind;
	//   - anything else (shutting down) → 503.
	Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error)
}
