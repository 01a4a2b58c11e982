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
// queue, answering each with a WaitResult (the Queue contract).
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

// ErrShuttingDown is the cause of a WaitShuttingDown: the queue is shutting
// down.
var ErrShuttingDown = errors.New("the lease wait queue is shutting down")

// Wait grants req now or when capacity appears before deadline, and says
// how it ended (see WaitOutcome). A grant made as ctx ended is given back by
// the queue, never returned.
func (w *Waiter) Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) WaitResult {
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
		return WaitResult{Outcome: WaitGranted, Lease: l}
	case ctx.Err() != nil:
		return WaitResult{Outcome: WaitCancelled, Err: fmt.Errorf("waiting for a proxy: %w", ctx.Err())}
	case outcome == flowcontrol.OutcomeRejectedCapacity:
		after, _ := flowcontrol.RetryAfter(err)
		return WaitResult{Outcome: WaitQueueFull, RetryAfter: after, Err: err}
	case outcome == flowcontrol.OutcomeEvictedShutdown, flowcontrol.IsShutdown(err):
		return WaitResult{Outcome: WaitShuttingDown, Err: ErrShuttingDown}
	case outcome == flowcontrol.OutcomeEvictedDeadline, flowcontrol.IsDeadline(err):
		nm := w.store.Diagnose(req)
		return WaitResult{Outcome: WaitNoMatch, Counts: *nm, QueuedAhead: flowcontrol.QueuedAhead(err),
			Err: fmt.Errorf("no proxy became free before the wait ended: %w", nm)}
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
	return WaitResult{Outcome: WaitRefused, Err: cause}
}
