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
// queue, answering each as the Queue contract says.
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

// ErrShuttingDown is the cause of a ReasonShuttingDown from the queue: it is
// shutting down.
var ErrShuttingDown = errors.New("the lease wait queue is shutting down")

// Wait grants req now or when capacity appears before deadline, and
// answers as Queue says: the queue's outcome, with the store's error it
// carries, becomes the service's Reason here and nowhere else. A grant made
// as ctx ended is given back by the queue, never returned.
func (w *Waiter) Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error) {
	flow := req.Flow
	if flow == "" {
		flow = req.Holder
	}
	if flow == "" {
		flow = AnonymousFlow
	}
	outcome, l, err := w.ctl.EnqueueAndWait(ctx, flowcontrol.Request[lease.AcquireRequest]{
		Flow: flow,
		// Every flow and band of one identity counts against its limit.
		Owner:    req.Holder,
		Priority: priority,
		Payload:  req,
		Deadline: deadline,
	})
	switch {
	case outcome == flowcontrol.OutcomeDispatched:
		return l, nil
	case ctx.Err() != nil:
		return nil, &Error{Reason: ReasonCancelled, Cause: fmt.Errorf("waiting for a proxy: %w", ctx.Err())}
	case outcome == flowcontrol.OutcomeRejectedCapacity:
		after, _ := flowcontrol.RetryAfter(err)
		return nil, &Error{Reason: ReasonQueueFull, RetryAfter: after, Cause: err}
	case outcome == flowcontrol.OutcomeEvictedShutdown, flowcontrol.IsShutdown(err):
		return nil, &Error{Reason: ReasonShuttingDown, Cause: ErrShuttingDown}
	case outcome == flowcontrol.OutcomeEvictedDeadline, flowcontrol.IsDeadline(err):
		nm := w.store.Diagnose(req)
		return nil, &Error{Reason: ReasonNoMatch, Counts: *nm, QueuedAhead: flowcontrol.QueuedAhead(err),
			Cause: fmt.Errorf("no proxy became free before the wait ended: %w", nm)}
	}
	// The store refused the request as it stands (TTL, name taken): its own
	// error, without the queue's around it.
	var rejected *flowcontrol.RejectedError
	var evicted *flowcontrol.EvictedError
	cause := err
	if errors.As(err, &rejected) {
		cause = rejected.Cause
	} else if errors.As(err, &evicted) {
		cause = evicted.Cause
	}
	return nil, FromStore(cause)
}
