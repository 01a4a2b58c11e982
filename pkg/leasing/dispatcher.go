package leasing

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// The adapter between the wait queue (pkg/flowcontrol) and the lease store
// (pkg/lease), as the flowcontrol package documentation prescribes. The two
// packages share no types; the Service sees the result as its Queue.

// LeaseController is the wait queue over the lease store.
type LeaseController = flowcontrol.Controller[lease.AcquireRequest, *lease.Lease]

// LeaseStore is what the adapter needs of the lease store; *lease.Store
// implements it.
type LeaseStore interface {
	// TryAcquire grants a lease now or fails with lease.ErrNoMatch (no
	// proxy can take it; lease.ErrExhausted when no proxy can take any
	// lease) or another error (bad TTL, name taken), without computing the
	// counts of a NoMatchError.
	TryAcquire(req lease.AcquireRequest) (*lease.Lease, error)
	// Diagnose returns the counts Acquire would report for req now.
	Diagnose(req lease.AcquireRequest) *lease.NoMatchError
	// HeldByHolder returns the live leases whose Holder is holder.
	HeldByHolder(holder string) int
	// Release ends a lease; idempotent.
	Release(id string) bool
	// NextChange is the next lease expiry or cooldown end (zero: none).
	NextChange() time.Time
}

var _ LeaseStore = (*lease.Store)(nil)

// leaseDispatcher is the flowcontrol.Dispatcher over the store.
type leaseDispatcher struct{ store LeaseStore }

var (
	_ flowcontrol.Dispatcher[lease.AcquireRequest, *lease.Lease] = leaseDispatcher{}
	_ flowcontrol.Classifier[lease.AcquireRequest]               = leaseDispatcher{}
)

// Class keys a request by what decides which proxies can take it: its
// namespace, selector (or ladder) and target. A request waiting for a target every
// proxy cools for then does not hold back its flow's requests for other
// targets, while requests for the same target keep their order.
func (leaseDispatcher) Class(req lease.AcquireRequest) string { return classKey(req) }

// classKey encodes namespace (or the namespaces a request without one is
// limited to), target and the sorted selector pairs (of each tier of a
// ladder, in order), each length-prefixed so that no two requests share a
// key by accident.
func classKey(req lease.AcquireRequest) string {
	var b strings.Builder
	part := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	part(req.Namespace)
	if req.Namespaces != nil {
		// A limited "any namespace" is its own class: sorted, so that the
		// same set is one class.
		nss := slices.Sorted(slices.Values(req.Namespaces))
		part("in:" + strings.Join(nss, ","))
	}
	part(req.Target)
	selector := func(sel map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(sel)) {
			part(k)
			part(sel[k])
		}
	}
	selector(req.Selector)
	for _, tier := range req.Selectors {
		// A tier's mark (no part begins with '|') and its size, then its
		// pairs: [{a:b}] and [{}, {a:b}] differ.
		b.WriteByte('|')
		part(strconv.Itoa(len(tier)))
		selector(tier)
	}
	return b.String()
}

// TryDispatch acquires with Flow set to the queue's flow, so the lease
// counts towards HeldBy(flow) from this moment.
func (d leaseDispatcher) TryDispatch(flow string, req lease.AcquireRequest) (*lease.Lease, flowcontrol.Verdict, error) {
	req.Flow = flow
	l, err := d.store.TryAcquire(req)
	switch {
	case err == nil:
		return l, flowcontrol.Granted, nil
	case lease.IsExhausted(err):
		// Nothing at all is free: the round stops here instead of offering
		// every other waiting flow's head.
		return nil, flowcontrol.Exhausted, nil
	case lease.IsNoMatch(err):
		return nil, flowcontrol.NoMatch, nil
	default:
		return nil, flowcontrol.NoMatch, err
	}
}

// Held is what the identity behind flow holds over all its flows: the
// queue's fair shares are per identity first (an identity that splits its
// requests over many flows gets one identity's share, divided among its
// flows by turn), as API Priority and Fairness keys flows by user.
func (d leaseDispatcher) Held(flow string) int { return d.store.HeldByHolder(holderOfFlow(flow)) }

func (d leaseDispatcher) Release(l *lease.Lease) {
	if l != nil {
		d.store.Release(l.ID)
	}
}

func (d leaseDispatcher) NextChange() time.Time { return d.store.NextChange() }

// NewLeaseController returns the wait queue over store. The caller wires
// the store's OnCapacity hook to c.OnCapacity and shuts c down when done
// (leaseQueueRunnable does both).
func NewLeaseController(store LeaseStore, clk clock.WithDelayedExecution, opts flowcontrol.Options) *LeaseController {
	return flowcontrol.NewController[lease.AcquireRequest, *lease.Lease](leaseDispatcher{store: store}, clk, opts)
}
