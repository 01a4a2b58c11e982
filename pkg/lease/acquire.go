package lease

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// CheckTTL says whether Acquire and Renew would accept ttl: nil, a *TTLError
// (over MaxTTL) or ErrNegativeTTL. Zero is the default TTL.
func (s *Store) CheckTTL(ttl time.Duration) error {
	_, err := s.ttlFor(ttl)
	return err
}

func (s *Store) ttlFor(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl < 0:
		return 0, ErrNegativeTTL
	case ttl == 0:
		return s.opts.DefaultTTL, nil
	case ttl > s.opts.MaxTTL:
		return 0, &TTLError{Requested: ttl, Max: s.opts.MaxTTL}
	}
	return ttl, nil
}

// Acquire grants a lease on the best eligible proxy: healthy, in the
// namespace, matching the selector, under MaxLeasesPerProxy, not cooling down
// for the target (nor for every target); the best is the one with the fewest
// live leases, then the lowest latency, then the name. Selection walks an
// index in that order, so its cost does not grow with the fleet. A request
// with a ladder (Selectors) takes the first of its tiers that can serve the
// target (ladder.go), within the site's budget for that tier.
//
// Errors: *NoMatchError (IsNoMatch) with counts, *TTLError (IsTTLTooLong),
// ErrNegativeTTL, *AlreadyExistsError (a named request colliding with a live lease).
func (s *Store) Acquire(req AcquireRequest) (*Lease, error) { return s.acquire(req, true) }

// TryAcquire is Acquire without the diagnostic counts: on no match it returns
// ErrNoMatch, cheaply, or ErrExhausted when no proxy at all can take a lease
// now. Flow control calls it while dispatching waiters.
func (s *Store) TryAcquire(req AcquireRequest) (*Lease, error) { return s.acquire(req, false) }

func (s *Store) acquire(req AcquireRequest, explain bool) (*Lease, error) {
	ttl, err := s.ttlFor(req.TTL)
	if err != nil {
		return nil, fmt.Errorf("acquiring a lease: %w", err)
	}
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	if s.frozen {
		s.unlockAndNotify(&p)
		return nil, ErrFrozen
	}
	if req.Name != "" && req.Namespace != "" {
		if _, taken := s.nameLocked(ProxyKey{Namespace: req.Namespace, Name: req.Name}); taken {
			s.unlockAndNotify(&p)
			return nil, &AlreadyExistsError{Namespace: req.Namespace, Name: req.Name}
		}
	}
	site, e, tier, refusal := s.placeLocked(&req, now)
	if e == nil {
		var err error
		switch {
		case explain:
			nm := s.explainLocked(&req, req.tiers()[tier], site, now)
			nm.Site, nm.Tier = refusal, tier
			err = nm
		case refusal != nil:
			err = &SiteBusyError{Refusal: *refusal}
		case s.free == 0:
			err = ErrExhausted
		default:
			err = ErrNoMatch
		}
		s.unlockAndNotify(&p)
		return nil, err
	}
	if req.Name != "" && req.Namespace == "" {
		if _, taken := s.nameLocked(ProxyKey{Namespace: e.info.Namespace, Name: req.Name}); taken {
			s.unlockAndNotify(&p)
			return nil, &AlreadyExistsError{Namespace: e.info.Namespace, Name: req.Name}
		}
	}
	le, err := s.grantLocked(e, &req, ttl, tier, now, &p)
	if err != nil {
		s.unlockAndNotify(&p)
		return nil, err
	}
	if site != nil {
		site.Granted(now, tier, e.key.String())
	}
	out := le.Lease
	s.unlockAndNotify(&p)
	return &out, nil
}

// Diagnose returns, without acquiring anything, the counts Acquire would put
// in its NoMatchError for req right now (flow control uses it to explain a
// wait that ran out).
func (s *Store) Diagnose(req AcquireRequest) *NoMatchError {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	site, _, tier, refusal := s.placeLocked(&req, now)
	c := s.explainLocked(&req, req.tiers()[tier], site, now)
	c.Site, c.Tier = refusal, tier
	s.unlockAndNotify(&p)
	return c
}

// placeLocked is where req would be granted now, without granting it:
// the budget of its target's site (nil: none), the proxy (nil: none) and
// the tier of its ladder; or, when the site's budget refuses it, why.
func (s *Store) placeLocked(req *AcquireRequest, now time.Time) (site *sites.Budget, e *proxyEntry, tier int, refusal *sites.Refusal) {
	if site = s.sites.For(req.Target); site != nil {
		if refusal = site.Admit(now); refusal != nil {
			return site, nil, 0, refusal
		}
	}
	e, tier, refusal = s.climbLocked(req, site, now)
	if s.probe != nil {
		s.probe.selected()
	}
	return site, e, tier, refusal
}

func (s *Store) grantLocked(e *proxyEntry, req *AcquireRequest, ttl time.Duration, tier int, now time.Time, p *pending) (*leaseEntry, error) {
	ns := e.info.Namespace
	le := &leaseEntry{
		Lease: Lease{
			Namespace:  ns,
			Name:       req.NamePrefix,
			Holder:     req.Holder,
			Flow:       req.Flow,
			Target:     req.Target,
			Tier:       tier,
			Proxy:      e.info,
			AcquiredAt: now,
			ExpiresAt:  now.Add(ttl),
			TTL:        ttl,
			Meta:       req.Meta,
		},
		proxy:        e,
		expiresNanos: now.Add(ttl).UnixNano(),
	}
	var id string
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return nil, fmt.Errorf("acquiring a lease: the ID generator keeps returning IDs in use (last %q)", id)
		}
		id = ""
		if s.opts.IDs != nil && req.Name == "" {
			id = s.opts.IDs.NewID(&le.Lease)
		}
		if id == "" {
			id = s.opts.NewID()
		}
		_, live := s.leases[id]
		_, ended := s.tombs[id]
		_, named := s.nameLocked(ProxyKey{Namespace: ns, Name: req.NamePrefix + id})
		if !live && !ended && !(named && req.Name == "") {
			break
		}
	}
	name := req.Name
	if name == "" {
		name = req.NamePrefix + id
	}
	if s.probe != nil {
		s.probe.granting(e, req, tier, now)
	}
	s.revision++
	le.ID, le.Name, le.Revision = id, name, s.revision
	s.insertLocked(le, Acquired, p)
	return le, nil
}

// nameLocked finds the live lease of a namespace and name. A lease named
// by its ID (every HTTP lease) has no entry in names: the lease table finds
// it, and the store keeps one map entry less per lease.
func (s *Store) nameLocked(nk ProxyKey) (id string, ok bool) {
	if id, ok = s.names[nk]; ok {
		return id, true
	}
	if le := s.leases[nk.Name]; le != nil && le.Name == le.ID && le.Namespace == nk.Namespace {
		return le.ID, true
	}
	return "", false
}

// setNameLocked records le's name (see nameLocked).
func (s *Store) setNameLocked(le *leaseEntry) {
	if le.Name != le.ID {
		s.names[ProxyKey{Namespace: le.Namespace, Name: le.Name}] = le.ID
	}
}

// endedNameLocked finds the newest ended lease of a namespace and name,
// as nameLocked the live one: tombNames holds only names that are not IDs.
func (s *Store) endedNameLocked(nk ProxyKey) (id string, ok bool) {
	if id, ok = s.tombNames[nk]; ok {
		return id, true
	}
	if t, ok := s.tombs[nk.Name]; ok && t.name == nk {
		return nk.Name, true
	}
	return "", false
}

// insertLocked makes le (its ID, name, proxy, flow and expiry set, at the
// current revision) a live lease and tells the subscribers why.
func (s *Store) insertLocked(le *leaseEntry, why Reason, p *pending) {
	s.leases[le.ID] = le
	s.setNameLocked(le)
	s.flows[le.Flow]++
	s.holders[le.Holder]++
	heap.Push(&s.expiries, le)
	s.scheduledLocked(le.ExpiresAt)
	s.attachLocked(le)
	s.emitLocked(p, Added, why, le)
}
