package lease

import (
	"cmp"
	"container/heap"
	"context"
	"maps"
	"slices"
	"strings"
	"time"
)

// UpsertProxy adds or updates a proxy of the fleet. Unchanged information is
// a cheap no-op, so it can be called on every cache update.
func (s *Store) UpsertProxy(info ProxyInfo) {
	info = info.clone()
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	e := s.proxies[info.Key()]
	switch {
	case e == nil:
		e = &proxyEntry{key: info.Key()}
		s.proxies[e.key] = e
	case !e.removed && e.info.equal(info):
		s.unlockAndNotify(&p)
		return
	}
	wasIndexed := e.indexed
	attrsChanged := e.removed || !maps.Equal(e.info.Attributes, info.Attributes)
	// A restored placeholder (Restore) holds leases while removed: its
	// first upsert shows the proxy as it is now on them, like any change.
	follow := e.leases > 0 && e.info.leaseVisible(info)
	s.unindexLocked(e)
	if !e.removed {
		s.removeMembersLocked(e)
	}
	e.info = info
	e.removed = false
	e.keys = keysFor(info)
	s.addMembersLocked(e)
	s.indexLocked(e)
	// Capacity appears when the proxy becomes available, or when its
	// attributes change (a waiting selector may match it now).
	p.capacity = p.capacity || (e.indexed && (!wasIndexed || attrsChanged))
	if follow {
		s.followProxyLocked(e, &p)
	}
	s.unlockAndNotify(&p)
}

// followProxyLocked shows the proxy's new address and health on each of its
// live leases (a replaced instance has a new address): holders and watchers
// learn it as a Modified event.
func (s *Store) followProxyLocked(e *proxyEntry, p *pending) {
	for _, le := range s.leasesOnLocked(e) {
		le.Proxy = e.info.clone()
		le.ProxyChangedAt = s.now()
		s.revision++
		le.Revision = s.revision
		s.emitLocked(p, Modified, ProxyChanged, le)
	}
}

// leasesOnLocked returns the live leases on e, oldest grant first.
func (s *Store) leasesOnLocked(e *proxyEntry) []*leaseEntry {
	out := make([]*leaseEntry, 0, len(e.live))
	for le := range e.live {
		out = append(out, le)
	}
	slices.SortFunc(out, func(a, b *leaseEntry) int {
		return cmp.Or(a.AcquiredAt.Compare(b.AcquiredAt), strings.Compare(a.ID, b.ID))
	})
	return out
}

// LiveOn returns the IDs of the leases live on the proxy key and the store's
// time of that answer (what a proxy's auth helper is told, see
// pkg/proxyauth).
func (s *Store) LiveOn(key ProxyKey) ([]string, time.Time) {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	var ids []string
	if e := s.proxies[key]; e != nil {
		for _, le := range s.leasesOnLocked(e) {
			ids = append(ids, le.ID)
		}
	}
	s.unlockAndNotify(&p)
	return ids, now
}

// RemoveProxy takes a proxy out of the fleet. Its live leases end (reason
// ProxyDeleted: a renewal answers that the lease ended because its proxy was
// deleted); its cooldowns are kept in case a proxy of the same name comes
// back.
func (s *Store) RemoveProxy(key ProxyKey) {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	if e := s.proxies[key]; e != nil && !e.removed {
		for _, le := range s.leasesOnLocked(e) {
			heap.Remove(&s.expiries, le.heapIndex)
			s.endLocked(le, now, ProxyDeleted, &p)
		}
		s.unindexLocked(e)
		s.removeMembersLocked(e)
		e.removed = true
		s.forgetIfUnusedLocked(e)
	}
	s.unlockAndNotify(&p)
}

// ListProxies returns the fleet (namespace "" = every namespace), sorted by
// namespace and name. It never fails; the error is for the discovery Lister
// interface. The ctx is unused.
func (s *Store) ListProxies(_ context.Context, namespace string) ([]ProxyInfo, error) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	out := make([]ProxyInfo, 0, len(s.proxies))
	for _, e := range s.proxies {
		if e.removed || (namespace != "" && e.info.Namespace != namespace) {
			continue
		}
		out = append(out, e.info)
	}
	s.unlockAndNotify(&p)
	slices.SortFunc(out, func(a, b ProxyInfo) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}
