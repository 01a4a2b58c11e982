package leasingtest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// Call is one Wait call as the queue received it.
type Call struct {
	Req      lease.AcquireRequest
	Priority int
	Deadline time.Time
}

// Queue is a leasing.Queue that never waits: it answers each request at
// once from Store, whatever its deadline (a grant, a no match with the
// store's counts, or the store's refusal), records every call, and answers
// the next call with the result given to Next, if any.
type Queue struct {
	Store *lease.Store
	// Mutate, when set, changes each request before the store sees it (a
	// broken queue, for a door's negative control).
	Mutate func(*lease.AcquireRequest)

	mu    sync.Mutex
	calls []Call
	next  *leasing.WaitResult
}

var _ leasing.Queue = (*Queue)(nil)

// Wait implements leasing.Queue.
func (q *Queue) Wait(_ context.Context, req lease.AcquireRequest, priority int, deadline time.Time) leasing.WaitResult {
	q.mu.Lock()
	q.calls = append(q.calls, Call{Req: req, Priority: priority, Deadline: deadline})
	next := q.next
	q.next = nil
	q.mu.Unlock()
	if next != nil {
		return *next
	}
	if q.Mutate != nil {
		q.Mutate(&req)
	}
	l, err := q.Store.Acquire(req)
	var nm *lease.NoMatchError
	switch {
	case err == nil:
		return leasing.WaitResult{Outcome: leasing.WaitGranted, Lease: l}
	case errors.As(err, &nm):
		return leasing.WaitResult{Outcome: leasing.WaitNoMatch, Counts: *nm, Err: err}
	}
	return leasing.WaitResult{Outcome: leasing.WaitRefused, Err: err}
}

// Next makes res the answer to the next call.
func (q *Queue) Next(res leasing.WaitResult) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.next = &res
}

// Calls returns the calls so far.
func (q *Queue) Calls() []Call {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]Call(nil), q.calls...)
}
