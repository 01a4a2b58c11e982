package lease

import (
	"slices"
	"sync"
)

type subscriber struct {
	id uint64
	fn func(Event)
}

type hook struct {
	id uint64
	fn func()
}

// pending collects what to tell the outside world once the lock is released.
type pending struct {
	events []Event
	// buf is the Store.eventBufs slice events came from.
	buf      *[]Event
	capacity bool
}

// maxPooledEvents bounds the event slices kept for reuse: a removal that
// ends thousands of leases does not keep its slice.
const maxPooledEvents = 64

// unlockAndNotify releases the lock and delivers what p collected: events in
// revision order (deliverMu is taken before mu is released), then hooks.
func (s *Store) unlockAndNotify(p *pending) {
	var hooks []hook
	if p.capacity {
		hooks = s.hooks
	}
	subs := s.subs
	if len(p.events) > 0 && len(subs) > 0 {
		s.deliverMu.Lock()
		s.mu.Unlock()
		for _, ev := range p.events {
			for _, sub := range subs {
				sub.fn(ev)
			}
		}
		s.deliverMu.Unlock()
	} else {
		s.mu.Unlock()
	}
	if p.buf != nil && cap(p.events) <= maxPooledEvents {
		clear(p.events) // subscribers got copies
		*p.buf = p.events[:0]
		s.eventBufs.Put(p.buf)
	}
	p.events, p.buf = nil, nil
	for _, h := range hooks {
		h.fn()
	}
}

func (s *Store) emitLocked(p *pending, t EventType, r Reason, le *leaseEntry) {
	if len(s.subs) == 0 {
		return
	}
	if p.buf == nil {
		if b, ok := s.eventBufs.Get().(*[]Event); ok {
			p.buf, p.events = b, (*b)[:0]
		} else {
			p.buf = new([]Event)
		}
	}
	p.events = append(p.events, Event{Type: t, Reason: r, Lease: le.Lease, Revision: le.Revision})
}

// OnCapacity registers a hook called whenever capacity may have appeared: a
// release, an expiry, a cooldown end, a proxy added, turned healthy or with
// new attributes. Hooks run after the store lock is released (and after the
// events of the same change are delivered), on the goroutine of the store
// call that observed the change — which may be any store call, including one
// the hook's owner makes while holding its own locks.
//
// So a hook must never wait: not for a lock, a channel or I/O. It may call
// the store (its lock is free), and it may take a lock with TryLock, leaving
// the work to the holder when that fails. The wait queue's hook
// (flowcontrol.Core.OnCapacity) does exactly that: it runs the dispatch
// round on this goroutine when its mutex is free, so a release is granted to
// a waiter before the release returns, and otherwise flags the round for the
// goroutine that holds the mutex. (The contract used to forbid every lock;
// it now forbids what can deadlock, waiting, and allows the TryLock the
// queue relies on.) Spurious calls are possible. The returned func
// unregisters the hook.
func (s *Store) OnCapacity(fn func()) (cancel func()) {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.hooks = append(slices.Clone(s.hooks), hook{id: id, fn: fn})
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.hooks = slices.DeleteFunc(slices.Clone(s.hooks), func(h hook) bool { return h.id == id })
			s.mu.Unlock()
		})
	}
}

// Subscribe registers fn for every lease event (Added/Acquired,
// Modified/Renewed, Modified/Reported, Deleted/Released, Deleted/Expired).
// Events arrive in Revision order, one at a time, without the store lock
// held, on the goroutine of the store call that caused them. fn must not
// block and must not call the store: delivery is serialised, so a blocked fn
// stalls every store call that produces events, and a store call from fn
// deadlocks. It may take a leaf lock that is held only briefly and never
// around a store call (the wait queue's list of flows whose Held changed). Enqueue without blocking (e.g. a buffered channel; on overflow,
// end the watch and let the client re-list). A watch that calls Subscribe
// first and Snapshot second sees every change once: drop events whose
// Revision is not above the snapshot's. A cancelled subscriber may still get
// events already being delivered.
func (s *Store) Subscribe(fn func(Event)) (cancel func()) {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.subs = append(slices.Clone(s.subs), subscriber{id: id, fn: fn})
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.subs = slices.DeleteFunc(slices.Clone(s.subs), func(x subscriber) bool { return x.id == id })
			s.mu.Unlock()
		})
	}
}
