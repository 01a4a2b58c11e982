package lease

import (
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Release ends a live lease. It is idempotent: it reports whether this call
// ended the lease (false for unknown, already released or expired IDs). A
// released lease stays reportable for CooldownWindow.
func (s *Store) Release(id string) bool {
	ok, _ := s.ReleaseAs(AnyHolder, id)
	return ok
}

// ReleaseAs is Release on behalf of holder: a live lease held by another
// holder is left alone and the answer is a *NotHolderError. AnyHolder
// releases whoever holds it.
func (s *Store) ReleaseAs(holder, id string) (bool, error) {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	if s.frozen {
		s.unlockAndNotify(&p)
		return false, ErrFrozen
	}
	le := s.leases[id]
	if le != nil && !mayChange(holder, le.Holder) {
		s.unlockAndNotify(&p)
		return false, &NotHolderError{ID: id}
	}
	if le != nil {
		heap.Remove(&s.expiries, le.heapIndex)
		s.endLocked(le, now, Released, &p)
	}
	s.unlockAndNotify(&p)
	return le != nil, nil
}

// AnyHolder is the holder argument of a caller whose right to change any
// lease was decided elsewhere (Kubernetes RBAC on ProxyLeases).
const AnyHolder = ""

// mayChange reports whether caller may change a lease held by holder.
func mayChange(caller, holder string) bool { return caller == AnyHolder || caller == holder }

// Report records how a request through the leased proxy went. rate_limited
// and banned put the (proxy, target) pair in cooldown for CooldownWindow
// (extending, never shortening, a running one). The target falls back from
// the report to the lease's target; when both are empty the report is
// refused (ErrNoTarget), and a holder runs at most MaxCooldownsPerHolder
// cooldowns (*CooldownLimitError): see reportCoolLocked. A
// lease that ended (released or expired) stays reportable for CooldownWindow
// after it ended: a late report lands exactly when the proxy is being
// rate-limited.
//
// Errors: ErrInvalidResult (checked first), ErrUnknownLease, ErrNoTarget,
// *CooldownLimitError; a refused report changes nothing.
func (s *Store) Report(id, result, target string) error {
	return s.ReportAs(AnyHolder, id, result, target)
}

// ReportAs is Report on behalf of holder: a report on a lease (live or
// ended) of another holder records nothing and is a *NotHolderError.
func (s *Store) ReportAs(holder, id, result, target string) error {
	if !ValidResult(result) {
		return fmt.Errorf("reporting %q on lease %s: %w", result, id, ErrInvalidResult)
	}
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	if s.frozen {
		s.unlockAndNotify(&p)
		return ErrFrozen
	}
	var e *proxyEntry
	var leaseTarget, leaseHolder string
	var acquiredAt time.Time
	le := s.leases[id]
	if le != nil {
		if !mayChange(holder, le.Holder) {
			s.unlockAndNotify(&p)
			return &NotHolderError{ID: id}
		}
		e, leaseTarget, leaseHolder, acquiredAt = le.proxy, le.Target, le.Holder, le.AcquiredAt
	} else if t, ok := s.tombs[id]; ok && t.until.After(now) {
		if !mayChange(holder, t.holder) {
			s.unlockAndNotify(&p)
			return &NotHolderError{ID: id}
		}
		e, leaseTarget, leaseHolder, acquiredAt = s.entryLocked(t.proxy), t.target, t.holder, t.acquiredAt
	} else {
		s.unlockAndNotify(&p)
		return fmt.Errorf("reporting on lease %s: %w", id, ErrUnknownLease)
	}
	if target == "" {
		target = leaseTarget
	}
	if result != ResultOK {
		// Under a site policy, rate_limited is the site's limit on everyone:
		// it cuts the site's budget, and cools no proxy (a site limiting its
		// total rate would otherwise cool the whole fleet for it). banned
		// does both.
		if result == ResultBanned || s.sites.For(target) == nil {
			if err := s.reportCoolLocked(e, leaseHolder, target, now); err != nil {
				s.forgetIfUnusedLocked(e)
				s.unlockAndNotify(&p)
				return fmt.Errorf("reporting %q on lease %s: %w", result, id, err)
			}
		}
		s.reportSiteLocked(result, target, acquiredAt, now)
	}
	s.forgetIfUnusedLocked(e)
	if le != nil {
		s.revision++
		le.LastResult = result
		le.Revision = s.revision
		s.emitLocked(&p, Modified, Reported, le)
	}
	s.unlockAndNotify(&p)
	return nil
}

// Renew sets a live lease to expire ttl from now (zero: its current TTL). The
// new expiry is never beyond MaxTTL from now: a longer ttl is a *TTLError.
// Errors: ErrNegativeTTL, *TTLError, ErrLeaseEnded (released or expired
// recently), ErrUnknownLease.
func (s *Store) Renew(id string, ttl time.Duration) (*Lease, error) {
	return s.RenewAs(AnyHolder, id, ttl)
}

// RenewAs is Renew on behalf of holder: a live lease of another holder is
// left as it is and the answer is a *NotHolderError.
func (s *Store) RenewAs(holder, id string, ttl time.Duration) (*Lease, error) {
	return s.UpdateAs(holder, id, ttl, nil)
}

// UpdateAs is RenewAs that also replaces the lease's Meta when meta is not
// nil, in the same change (one revision, one Modified event whose Previous
// is the lease before).
func (s *Store) UpdateAs(holder, id string, ttl time.Duration, meta *Metadata) (*Lease, error) {
	if ttl != 0 {
		if _, err := s.ttlFor(ttl); err != nil {
			return nil, fmt.Errorf("renewing lease %s: %w", id, err)
		}
	}
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	if s.frozen {
		s.unlockAndNotify(&p)
		return nil, ErrFrozen
	}
	le := s.leases[id]
	if le == nil {
		t, ended := s.tombs[id]
		s.unlockAndNotify(&p)
		if ended && t.until.After(now) {
			if !mayChange(holder, t.holder) {
				return nil, &NotHolderError{ID: id}
			}
			return nil, fmt.Errorf("renewing lease %s: %w", id, &EndedError{Reason: t.reason})
		}
		return nil, fmt.Errorf("renewing lease %s: %w", id, ErrUnknownLease)
	}
	if !mayChange(holder, le.Holder) {
		s.unlockAndNotify(&p)
		return nil, &NotHolderError{ID: id}
	}
	if ttl == 0 {
		ttl = min(le.TTL, s.opts.MaxTTL)
	}
	var prev *Lease
	if meta != nil {
		if len(s.subs) > 0 {
			before := le.Lease
			prev = &before
		}
		le.Meta = *meta
	}
	le.TTL = ttl
	le.ExpiresAt = now.Add(ttl)
	le.expiresNanos = le.ExpiresAt.UnixNano()
	heap.Fix(&s.expiries, le.heapIndex)
	s.scheduledLocked(le.ExpiresAt)
	s.revision++
	le.Revision = s.revision
	s.emitLocked(&p, Modified, Renewed, le)
	if prev != nil {
		p.events[len(p.events)-1].Previous = prev
	}
	out := le.Lease
	s.unlockAndNotify(&p)
	return &out, nil
}

// Get returns a live lease by ID.
func (s *Store) Get(id string) (Lease, bool) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	var out Lease
	le, ok := s.leases[id]
	if ok {
		out = le.Lease
	}
	s.unlockAndNotify(&p)
	return out, ok
}

// GetAs returns a live lease of holder (AnyHolder: anyone's). Errors:
// *NotHolderError (another holder's lease, live or ended), an *EndedError
// (IsLeaseEnded; ended within the report window, with why),
// ErrUnknownLease.
func (s *Store) GetAs(holder, id string) (Lease, error) {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	defer s.unlockAndNotify(&p)
	le, err := s.liveAsLocked(holder, id, now)
	if err != nil {
		return Lease{}, err
	}
	return le.Lease, nil
}

// liveAsLocked is holder's live lease id, with GetAs's errors.
func (s *Store) liveAsLocked(holder, id string, now time.Time) (*leaseEntry, error) {
	if le, ok := s.leases[id]; ok {
		if !mayChange(holder, le.Holder) {
			return nil, &NotHolderError{ID: id}
		}
		return le, nil
	}
	if t, ok := s.tombs[id]; ok && t.until.After(now) {
		if !mayChange(holder, t.holder) {
			return nil, &NotHolderError{ID: id}
		}
		return nil, fmt.Errorf("lease %s: %w", id, &EndedError{Reason: t.reason})
	}
	return nil, fmt.Errorf("lease %s: %w", id, ErrUnknownLease)
}

// GetByName returns a live lease by namespace and name.
func (s *Store) GetByName(namespace, name string) (Lease, bool) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	var out Lease
	id, ok := s.nameLocked(ProxyKey{Namespace: namespace, Name: name})
	if ok {
		out = s.leases[id].Lease
	}
	s.unlockAndNotify(&p)
	return out, ok
}

// LookupName finds the lease a request by name is about: the live lease of
// namespace/name (live true), else the one of that name that ended within
// the report window (live false). ok is false when there is neither.
func (s *Store) LookupName(namespace, name string) (id string, live, ok bool) {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	key := ProxyKey{Namespace: namespace, Name: name}
	if id, ok = s.nameLocked(key); ok {
		live = true
	} else if id, ok = s.endedNameLocked(key); ok {
		t, kept := s.tombs[id]
		ok = kept && t.until.After(now)
	}
	s.unlockAndNotify(&p)
	if !ok {
		id = ""
	}
	return id, live, ok
}

// List returns the live leases of a namespace ("" = all), sorted by
// namespace and name.
func (s *Store) List(namespace string) []Lease {
	out, _ := s.Snapshot(namespace)
	return out
}

// Snapshot is List plus the store revision it reflects. A watch that calls
// Subscribe first and Snapshot second sees every change exactly once by
// dropping events whose Revision is not above the snapshot's.
func (s *Store) Snapshot(namespace string) ([]Lease, uint64) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	out := make([]Lease, 0, len(s.leases))
	for _, le := range s.leases {
		if namespace == "" || le.Namespace == namespace {
			out = append(out, le.Lease)
		}
	}
	rev := s.revision
	s.unlockAndNotify(&p)
	slices.SortFunc(out, func(a, b Lease) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, rev
}

// Revision is the store revision: that of its last change.
func (s *Store) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revision
}

// Counts returns the number of live leases per proxy (proxies without leases
// are absent). Cost: O(live leases).
func (s *Store) Counts() map[ProxyKey]int {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	out := make(map[ProxyKey]int, len(s.leases))
	for _, le := range s.leases {
		out[le.proxy.key]++
	}
	s.unlockAndNotify(&p)
	return out
}

// Active returns the number of live leases.
func (s *Store) Active() int {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	n := len(s.leases)
	s.unlockAndNotify(&p)
	return n
}

// HeldByHolder returns the number of live leases of a holder, over all its
// flows, in O(1) (amortised over the expiries it applies).
func (s *Store) HeldByHolder(holder string) int {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	n := s.holders[holder]
	s.unlockAndNotify(&p)
	return n
}

// HeldBy returns the number of live leases of a flow, in O(1) (amortised
// over the expiries it applies).
func (s *Store) HeldBy(flow string) int {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	n := s.flows[flow]
	s.unlockAndNotify(&p)
	return n
}
