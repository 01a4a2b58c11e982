package leasing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// APIs name the front doors in lease_requests_total{api}.
const (
	APIHTTP       = "http"
	APIKubernetes = "kubernetes"
)

// Outcomes of a lease request (lease_requests_total{outcome}).
const (
	OutcomeGranted    = "granted"
	OutcomeNoMatch    = "no_match"
	OutcomeBadRequest = "bad_request"
	OutcomeRejected   = "rejected" // a wait queue was full
	OutcomeCancelled  = "cancelled"
	OutcomeError      = "error"
)

// APIs returns every API label value.
func APIs() []string { return []string{APIHTTP, APIKubernetes} }

// Outcomes returns every outcome label value.
func Outcomes() []string {
	return []string{OutcomeGranted, OutcomeNoMatch, OutcomeBadRequest, OutcomeRejected, OutcomeCancelled, OutcomeError}
}

// Recorder counts lease requests; pkg/metrics implements it. It must not
// block.
type Recorder interface {
	LeaseRequest(api, outcome string)
}

// waiter is what a Door sends requests to: *Waiter, or a test's stand-in.
type waiter interface {
	Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error)
}

// Door is one front door's way into the lease path. Every lease request of
// that door goes through it, so what the doors would otherwise each decide
// is decided here once: a grant whose caller left is given back, and every
// outcome is counted, labelled with the door's API.
type Door struct {
	api     string
	waiter  waiter
	release func(id string) bool
	rec     Recorder
}

// NewDoor returns the door of api over w; release gives back a grant whose
// caller left. rec may be nil.
func NewDoor(api string, w waiter, release func(id string) bool, rec Recorder) *Door {
	if rec == nil {
		rec = nopRecorder{}
	}
	return &Door{api: api, waiter: w, release: release, rec: rec}
}

// Door returns the door of api over this store and queue.
func (l *Leasing) Door(api string, rec Recorder) *Door {
	return NewDoor(api, l.Waiter, l.Store.Release, rec)
}

// Wait is Waiter.Wait, counted. A lease granted after ctx ended (the caller
// left in that instant) is released here and answered as ctx's error: nobody
// would use or release it.
func (d *Door) Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error) {
	l, err := d.waiter.Wait(ctx, req, priority, deadline)
	if err == nil && ctx.Err() != nil {
		d.release(l.ID)
		l, err = nil, fmt.Errorf("the caller left before the grant was answered: %w", ctx.Err())
	}
	d.rec.LeaseRequest(d.api, OutcomeOf(err))
	return l, err
}

// Invalid counts a request the door refused as malformed before it reached
// the queue.
func (d *Door) Invalid() { d.rec.LeaseRequest(d.api, OutcomeBadRequest) }

// OutcomeOf is the outcome of a Wait that returned err.
func OutcomeOf(err error) string {
	var ra interface{ RetryAfter() time.Duration }
	switch {
	case err == nil:
		return OutcomeGranted
	case lease.IsNoMatch(err):
		return OutcomeNoMatch
	case errors.As(err, &ra):
		return OutcomeRejected
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCancelled
	case lease.IsTTLTooLong(err), lease.IsNegativeTTL(err), lease.IsAlreadyExists(err):
		return OutcomeBadRequest
	}
	return OutcomeError
}

type nopRecorder struct{}

func (nopRecorder) LeaseRequest(string, string) {}
