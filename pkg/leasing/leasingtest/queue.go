package leasingtest

import (
	"context"
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
// store's counts, or the store's refusal, as leasing.FromStore maps it),
// records every call, and answers the next call with the error given to
// Next, if any.
type Queue struct {
	Store *lease.Store
	// Mutate, when set, changes each request before the store sees it (a
	// broken queue, for a door's negative control).
	Mutate func(*lease.AcquireRequest)

	mu    sync.Mutex
	calls []Call
	next  error
}

var _ leasing.Queue = (*Queue)(nil)

// Wait implements leasing.Queue.
func (q *Queue) Wait(_ context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error) {
	q.mu.Lock()
	q.calls = append(q.calls, Call{Req: req, Priority: priority, Deadline: deadline})
	next := q.next
	q.next = nil
	q.mu.Unlock()
	if next != nil {
		return nil, next
	}
	if q.Mutate != nil {
		q.Mutate(&req)
	}
	l, err := q.Store.Acquire(req)
	if err != nil {
		return nil, leasing.FromStore(err)
	}
	return l, nil
}

// Next makes err (a *leasing.Error, as the real queue answers) the answer
// to the next call.
func (q *Queue) Next(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.next = err
}

// Calls returns the calls so far.
func (q *Queue) Calls() []Call {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]Call(nil), q.calls...)
}
