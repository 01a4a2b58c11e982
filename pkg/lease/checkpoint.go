package lease

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// State is what of the store must outlive the process: live leases (as the
// APIs show them), cooldowns, ended leases still inside their report window
// and the revision counter. Proxies are not in it: the Proxy informer feeds
// them again.
type State struct {
	// Revision is the store's revision counter.
	Revision uint64
	// TakenAt is the store's time when the state was taken: a lease granted
	// after it is not in the state (see Readmit).
	TakenAt time.Time
	// Leases are the live leases, Proxy as granted (or as last followed).
	Leases []Lease
	// Cooldowns are the (proxy, target) pairs cooling; target "" is the
	// whole proxy.
	Cooldowns []Cooldown
	// Ended are leases ended within the report window: a late report still
	// starts a cooldown, a renew still says why the lease ended.
	Ended []EndedLease
}

// Cooldown is one cooling (proxy, target) pair.
type Cooldown struct {
	Proxy  ProxyKey
	Target string
	Until  time.Time
	// Holder is the holder whose report started it ("" in a state written
	// before cooldowns were counted per holder: it counts to nobody).
	Holder string
}

// EndedLease is an ended lease remembered until Until.
type EndedLease struct {
	ID     string
	Name   ProxyKey
	Proxy  ProxyKey
	Target string
	Holder string
	Reason Reason
	Until  time.Time
}

// Changes counts every change a checkpoint must see: it grows with the
// revision and with every cooldown started (a report on an ended lease starts
// one without a revision).
func (s *Store) Changes() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revision + s.coolings
}

// MaxEndedInState bounds the ended leases StateInto writes: the newest ones.
// A report on an older ended lease after a restart finds no lease (404)
// and starts no cooldown.
const MaxEndedInState = 10000

// StateInto writes the store's durable state at now into st, reusing its slices (a checkpointer that
// takes one a second allocates nothing for it after the first), with the
// leases in no particular order: sorting 100,000 of them moved 40 MB each
// time, and the checkpoint needs no order.
func (s *Store) StateInto(st *State) uint64 {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	st.Revision, st.TakenAt = s.revision, now
	st.Leases, st.Cooldowns, st.Ended = slices.Grow(st.Leases[:0], len(s.leases)), st.Cooldowns[:0], st.Ended[:0]
	for _, le := range s.leases {
		st.Leases = append(st.Leases, le.Lease)
	}
	for _, e := range s.proxies {
		for target, c := range e.cooldowns {
			if c.until.After(now) {
				st.Cooldowns = append(st.Cooldowns, Cooldown{Proxy: e.key, Target: target, Until: c.until, Holder: c.holder})
			}
		}
	}
	// The newest ended leases first, at most MaxEndedInState: at a high
	// lease churn the report window holds far more than a checkpoint should
	// copy under the lock each second.
	for i := len(s.tombQ) - 1; i >= s.tombHead && len(st.Ended) < MaxEndedInState; i-- {
		t := s.tombQ[i]
		if t.gone || !t.until.After(now) {
			continue // forgotten or over
		}
		st.Ended = append(st.Ended, EndedLease{ID: t.id, Name: t.name, Proxy: t.proxy, Target: t.target,
			Holder: t.holder, Reason: t.reason, Until: t.until})
	}
	changes := s.revision + s.coolings
	s.unlockAndNotify(&p)
	// Oldest first, the order the store ended them in (and Restore keeps):
	// the same state gives the same list without sorting 10,000 IDs.
	slices.Reverse(st.Ended)
	// Compared field by field: a key built per comparison allocated
	// millions of strings per checkpoint at 100,000 cooldowns.
	slices.SortFunc(st.Cooldowns, func(a, b Cooldown) int {
		return cmp.Or(strings.Compare(a.Proxy.Namespace, b.Proxy.Namespace), strings.Compare(a.Proxy.Name, b.Proxy.Name), strings.Compare(a.Target, b.Target))
	})
	return changes
}

// ErrNotEmpty is returned by Restore into a store that has leases, ended
// leases, cooldowns or a revision of its own.
var ErrNotEmpty = errors.New("restoring lease state: the store already has lease state")

// Restore loads st into a store that has no lease state yet (before any API
// serves; the Proxy informer may already have fed it proxies, as on a
// standby taking over). A lease goes onto its proxy when the store has it
// (shown as the proxy is now, if its address or health changed), else onto
// a placeholder that counts its leases and cooldowns until the informer's
// first UpsertProxy makes it live; EndLeasesOfAbsentProxies ends the leases
// of proxies deleted meanwhile. What expired while no process served is
// applied as if one had: a lease past its expiry is ended (reason Expired), a
// cooldown or ended lease past its time is dropped. Emits no events.
func (s *Store) Restore(st State) error {
	var p pending
	s.mu.Lock()
	defer s.unlockAndNotify(&p)
	if len(s.leases) > 0 || len(s.tombs) > 0 || s.revision > 0 || s.coolings > 0 {
		return ErrNotEmpty
	}
	now := s.now()
	seen := make(map[string]bool, len(st.Leases))
	for _, l := range st.Leases {
		if l.ID == "" || l.Namespace == "" || l.Proxy.Name == "" {
			return fmt.Errorf("restoring lease %q: missing ID, namespace or proxy", l.ID)
		}
		if seen[l.ID] {
			return fmt.Errorf("restoring lease %q: listed twice", l.ID)
		}
		seen[l.ID] = true
	}
	s.revision = st.Revision
	if !st.TakenAt.IsZero() {
		s.readmitFrom, s.readmitUntil = st.TakenAt, now
	}
	for _, l := range st.Leases {
		key := l.Proxy.Key()
		e := s.proxies[key]
		if e == nil {
			e = &proxyEntry{key: key, info: l.Proxy.clone(), removed: true}
			s.proxies[key] = e
		}
		le := &leaseEntry{Lease: l, proxy: e, expiresNanos: l.ExpiresAt.UnixNano()}
		le.Proxy = l.Proxy.clone()
		if !e.removed && e.info.leaseVisible(l.Proxy) {
			le.Proxy = e.info.clone()
			le.ProxyChangedAt = now
			s.revision++
			le.Revision = s.revision
		}
		s.leases[l.ID] = le
		s.setNameLocked(le)
		s.flows[l.Flow]++
		s.holders[l.Holder]++
		heap.Push(&s.expiries, le)
		s.scheduledLocked(le.ExpiresAt)
		s.attachLocked(le)
	}
	for _, c := range st.Cooldowns {
		if c.Until.After(now) {
			s.coolLocked(s.entryLocked(c.Proxy), c.Target, c.Holder, c.Until)
		}
	}
	// In the order they ended (StateInto writes them so; a state of another
	// order is sorted, keeping the order of equal times).
	ended := slices.Clone(st.Ended)
	slices.SortStableFunc(ended, func(a, b EndedLease) int { return a.Until.Compare(b.Until) })
	for _, t := range ended {
		if !t.Until.After(now) {
			continue
		}
		if _, live := s.leases[t.ID]; live {
			continue
		}
		s.rememberLocked(&tombstone{id: t.ID, name: t.Name, proxy: t.Proxy, target: t.Target, holder: t.Holder, reason: t.Reason, until: t.Until})
	}
	// Leases that expired while down end now, in expiry order, as Start's
	// timer would have ended them.
	s.advanceLocked(now, &p)
	p.events = nil // a restore is not news: watchers start after it
	return nil
}

// EndLeasesOfAbsentProxies ends (reason ProxyDeleted) the live leases of
// proxies the informer never brought back after a Restore. Call it once the
// Proxy informer has synced.
func (s *Store) EndLeasesOfAbsentProxies() int {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	n := 0
	for _, le := range s.leases {
		if le.proxy.removed {
			heap.Remove(&s.expiries, le.heapIndex)
			s.endLocked(le, now, ProxyDeleted, &p)
			n++
		}
	}
	for _, e := range s.proxies {
		s.forgetIfUnusedLocked(e)
	}
	s.unlockAndNotify(&p)
	return n
}
