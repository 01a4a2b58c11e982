package leasing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Waiter serves the lease requests of both lease APIs through the wait
// queue, translating its outcomes into the errors the Queue contract names.
type Waiter struct {
	ctl   *LeaseController
	store LeaseStore
}

// NewWaiter returns a waiter over ctl and the store ctl dispatches to.
func NewWaiter(ctl *LeaseController, store LeaseStore) *Waiter {
	return &Waiter{ctl: ctl, store: store}
}

// AnonymousFlow is the flow of a request that names neither a flow nor a
// holder (the HTTP API with authentication off).
const AnonymousFlow = "anonymous"

// ErrShuttingDown answers requests that meet a queue shutting down
// (ReasonShuttingDown). It is not a flowcontrol.RejectedError: that type has
// a RetryAfter method, which would make it ReasonQueueFull.
var ErrShuttingDown = errors.New("the lease wait queue is shutting down")

// Wait grants req now or when capacity appears before deadline. Errors, as
// Queue requires:
//   - the deadline passed: a ReasonNoMatch *Error with the counts of that
//     moment and how many requests of its flow for the same proxies waited
//     ahead of it;
//   - a queue limit: the *flowcontrol.RejectedError, whose RetryAfter method
//     the APIs answer with 429 and Retry-After;
//   - ctx ended: ctx.Err(), wrapped (flowcontrol gives back a lease granted
//     in that instant);
//   - the store refused the request as it stands (TTL, name taken): the
//     store's error, wrapped, without the RetryAfter method;
//   - shutting down: ErrShuttingDown.
func (w *Waiter) Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error) {
	flow := req.Flow
	if flow == "" {
		flow = req.Holder
	}
	if flow == "" {
		flow = AnonymousFlow
	}
	outcome, l, err := w.ctl.EnqueueAndWait(ctx, flowcontrol.Request[lease.AcquireRequest]{
		Flow:     flow,
		Priority: priority,
		Payload:  req,
		Deadline: deadline,
	})
	if err == nil {
		return l, nil
	}
	switch {
	case outcome == flowcontrol.OutcomeRejectedCapacity:
		return nil, err
	case ctx.Err() != nil:
		return nil, fmt.Errorf("waiting for a proxy: %w", ctx.Err())
	case flowcontrol.IsShutdown(err):
		return nil, ErrShuttingDown
	case flowcontrol.IsDeadline(err):
		nm := w.store.Diagnose(req)
		return nil, &Error{Reason: ReasonNoMatch, Counts: *nm, QueuedAhead: flowcontrol.QueuedAhead(err),
			err: fmt.Errorf("no proxy became free before the wait ended: %w", nm)}
	}
	// Other: the store's own error (or an invalid request), without the
	// flowcontrol error around it.
	var rejected *flowcontrol.RejectedError
	var evicted *flowcontrol.EvictedError
	cause := err
	if errors.As(err, &rejected) {
		cause = rejected.Cause
	} else if errors.As(err, &evicted) {
		cause = evicted.Cause
	}
	return nil, fmt.Errorf("waiting for a proxy: %w", cause)
}
