package apiserver

import (
	"context"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// LeaseStore is what the server needs of the lease store (*lease.Store
// satisfies it). The server is the only writer of lease metadata it adds
// (labels, annotations, spec fields the store does not keep); the store stays
// the single source of truth for which leases exist.
type LeaseStore interface {
	// Acquire grants a lease now or fails with *lease.NoMatchError,
	// *lease.TTLError, lease.ErrNegativeTTL or *lease.AlreadyExistsError (a
	// live lease of that namespace already has req.Name).
	Acquire(req lease.AcquireRequest) (*lease.Lease, error)
	// Release ends a live lease; it reports whether this call ended it.
	Release(id string) bool
	// Report records a result; errors lease.ErrInvalidResult,
	// lease.ErrUnknownLease. Ended leases stay reportable for one cooldown
	// window.
	Report(id, result, target string) error
	// Renew sets a live lease to expire ttl from now; errors
	// lease.ErrLeaseEnded, lease.ErrUnknownLease, *lease.TTLError.
	Renew(id string, ttl time.Duration) (*lease.Lease, error)
	// Snapshot returns the live leases of a namespace ("" = all) and the
	// store revision they reflect.
	Snapshot(namespace string) ([]lease.Lease, uint64)
	// Subscribe delivers every lease event in revision order, synchronously
	// and without the store lock; fn must not call the store.
	Subscribe(fn func(lease.Event)) (cancel func())
	// Sweep applies the expiries that are due (delivering their events).
	Sweep()
	// NextChange is the earliest future time a lease may expire or a cooldown
	// end (zero: none scheduled).
	NextChange() time.Time
	// Options are the store's effective options (MaxTTL, CooldownWindow).
	Options() lease.Options
}

var _ LeaseStore = (*lease.Store)(nil)

// Waiter is the lease path every ProxyLease create goes through, one
// without spec.waitSeconds with a deadline of now (*leasing.Door implements
// it, over the wait queue; it counts every outcome and gives back a grant
// whose caller left). It is optional (tests): without one, requests go to
// the store directly, nothing is counted, and spec.waitSeconds above 0 is
// rejected with 422.
type Waiter interface {
	// Invalid counts a request refused as invalid before it reached the
	// queue.
	Invalid()
	// Wait returns a lease for req, granted now or when capacity appears
	// before deadline. priority picks the band (higher first); req.Flow is the
	// fairness flow. Errors:
	//   - the deadline passed: lease.IsNoMatch is true (ideally a
	//     *lease.NoMatchError with the store's counts) → 409;
	//   - rejected without queueing (a queue limit): an error with a method
	//     RetryAfter() time.Duration → 429 with Retry-After;
	//   - ctx ended: ctx.Err(), wrapped; no lease may be left behind → 504;
	//   - anything else (shutting down) → 503.
	Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error)
}
