package lease

import (
	"container/heap"
	"context"
	"math"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

type cooldownItem struct {
	e      *proxyEntry
	target string
	until  time.Time
}

// advanceLocked applies everything due at now: lease expiries (in expiry
// order), cooldown ends, and forgetting ended leases past their report window.
func (s *Store) advanceLocked(now time.Time, p *pending) {
	for len(s.expiries) > 0 && !s.expiries[0].ExpiresAt.After(now) {
		le := heap.Pop(&s.expiries).(*leaseEntry)
		s.endLocked(le, le.ExpiresAt, Expired, p)
	}
	for len(s.cools) > 0 && !s.cools[0].until.After(now) {
		it := heap.Pop(&s.cools).(*cooldownItem)
		e := it.e
		cur, ok := e.cooldowns[it.target]
		if !ok || !cur.until.Equal(it.until) {
			continue // superseded by a later cooldown for the same pair
		}
		delete(e.cooldowns, it.target)
		s.uncountCoolingLocked(cur.holder)
		if it.target == "" {
			e.globalCooling = false
			s.indexLocked(e)
		}
		p.capacity = p.capacity || e.indexed
		s.forgetIfUnusedLocked(e)
	}
	for _, b := range s.sites.Budgets() {
		if b.Advance(now) {
			p.capacity = true
		}
	}
	s.expireTombsLocked(now)
}

// endLocked removes a live lease (already popped from the expiry heap) and
// remembers it for reports until endedAt + CooldownWindow.
func (s *Store) endLocked(le *leaseEntry, endedAt time.Time, reason Reason, p *pending) {
	delete(s.leases, le.ID)
	nk := ProxyKey{Namespace: le.Namespace, Name: le.Name}
	if s.names[nk] == le.ID {
		delete(s.names, nk)
	}
	if n := s.flows[le.Flow] - 1; n > 0 {
		s.flows[le.Flow] = n
	} else {
		delete(s.flows, le.Flow)
	}
	if n := s.holders[le.Holder] - 1; n > 0 {
		s.holders[le.Holder] = n
	} else {
		delete(s.holders, le.Holder)
	}
	until := endedAt.Add(s.opts.CooldownWindow)
	s.rememberLocked(&tombstone{id: le.ID, name: nk, proxy: le.proxy.key, target: le.Target, holder: le.Holder, reason: reason, until: until, acquiredAt: le.AcquiredAt})
	e := le.proxy
	if le.site != nil {
		le.site.Ended(endedAt, le.Tier)
		p.capacity = true // a slot of the site's budget
	}
	s.detachLocked(le)
	p.capacity = p.capacity || e.indexed
	s.forgetIfUnusedLocked(e)
	s.revision++
	le.Revision = s.revision
	s.emitLocked(p, Deleted, reason, le)
}

// coolLocked puts (e, target) in cooldown until until, extending (never
// shortening) a running one, which keeps the holder that started it.
func (s *Store) coolLocked(e *proxyEntry, target, holder string, until time.Time) {
	cur, running := e.cooldowns[target]
	if running && !until.After(cur.until) {
		return
	}
	if e.cooldowns == nil {
		e.cooldowns = map[string]cooling{}
	}
	if running {
		holder = cur.holder
	} else if holder != "" {
		s.cooledBy[holder]++
	}
	e.cooldowns[target] = cooling{until: until, holder: holder}
	s.coolings++
	heap.Push(&s.cools, &cooldownItem{e: e, target: target, until: until})
	s.scheduledLocked(until)
	if target == "" && !e.globalCooling {
		s.unindexLocked(e)
		e.globalCooling = true
	}
}

// NextChange returns the earliest future time at which capacity may appear
// by itself (a lease expiry or a cooldown end), or the zero time when nothing
// is scheduled. Flow control arms its timer on it and calls Sweep (or any
// store method) when it fires.
func (s *Store) NextChange() time.Time {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	for len(s.cools) > 0 {
		it := s.cools[0]
		if cur, ok := it.e.cooldowns[it.target]; ok && cur.until.Equal(it.until) {
			break
		}
		heap.Pop(&s.cools) // superseded
	}
	var next time.Time
	if len(s.expiries) > 0 {
		next = s.expiries[0].ExpiresAt
	}
	if len(s.cools) > 0 && (next.IsZero() || s.cools[0].until.Before(next)) {
		next = s.cools[0].until
	}
	for _, b := range s.sites.Budgets() {
		if at := b.NextChange(); !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	s.unlockAndNotify(&p)
	return next
}

// Sweep applies every expiry and cooldown end due now (emitting their events
// and hooks) and frees ended leases past their report window.
func (s *Store) Sweep() {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	s.unlockAndNotify(&p)
}

// Start applies every lease expiry and cooldown end when it falls due, so
// its events reach subscribers (watchers of the Kubernetes API, the wait
// queue) at that instant rather than when a caller next looks, and frees
// ended leases past their report window. It runs one timer, armed at the
// store's next change and re-armed when an earlier one is scheduled, at most
// SweepInterval apart. It is a manager Runnable that every replica runs (see
// NeedLeaderElection).
func (s *Store) Start(ctx context.Context) error {
	log.FromContext(ctx).Info("lease expiry timer started", "maxInterval", s.opts.SweepInterval)
	t := s.clock.NewTimer(s.opts.SweepInterval)
	defer t.Stop()
	for {
		// While the next change is computed, any newly scheduled one wakes
		// the loop again.
		s.armed.Store(math.MaxInt64)
		if due := s.arm(t, s.NextChange()); due {
			// Already due: now, not at a timer's next tick (a fake
			// clock's timer set to 0 fires only when it is stepped).
			s.Sweep()
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			s.Sweep()
		case <-s.wake:
		}
	}
}

// arm sets t to fire at next (zero: none), at most SweepInterval from now,
// or reports that next is due already (t untouched). A timer counts from the
// instant it is reset, so a clock that moved between reading now and the
// reset (a test's fake clock, stepped meanwhile) would fire late by that
// much: then it is armed again from the new now.
func (s *Store) arm(t clock.Timer, next time.Time) (due bool) {
	for {
		now := s.clock.Now()
		d := s.opts.SweepInterval
		if !next.IsZero() {
			d = min(d, next.Sub(now))
		}
		if d <= 0 {
			return true
		}
		s.armed.Store(now.Add(d).UnixNano())
		// Stop and drain before Reset, as clock.Timer requires.
		if !t.Stop() {
			select {
			case <-t.C():
			default:
			}
		}
		t.Reset(d)
		if s.clock.Since(now) < time.Millisecond {
			return false
		}
	}
}

// scheduledLocked wakes Start when at is earlier than the instant its timer
// is armed for (a short lease granted, a lease renewed shorter, a cooldown
// set); later instants cost nothing.
func (s *Store) scheduledLocked(at time.Time) {
	if at.UnixNano() >= s.armed.Load() {
		return
	}
	s.armed.Store(at.UnixNano())
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// NeedLeaderElection is false: every replica keeps a store and the sweep
// only frees memory, so every replica runs it.
func (s *Store) NeedLeaderElection() bool { return false }

type leaseHeap []*leaseEntry

func (h leaseHeap) Len() int { return len(h) }

func (h leaseHeap) Less(i, j int) bool {
	if h[i].expiresNanos != h[j].expiresNanos {
		return h[i].expiresNanos < h[j].expiresNanos
	}
	return h[i].ID < h[j].ID
}

func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}

func (h *leaseHeap) Push(x any) {
	le := x.(*leaseEntry)
	le.heapIndex = len(*h)
	*h = append(*h, le)
}

func (h *leaseHeap) Pop() any {
	old := *h
	le := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	le.heapIndex = -1
	return le
}

type coolHeap []*cooldownItem

func (h coolHeap) Len() int { return len(h) }

func (h coolHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }

func (h coolHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *coolHeap) Push(x any) { *h = append(*h, x.(*cooldownItem)) }

func (h *coolHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
