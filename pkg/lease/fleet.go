package lease

import (
	"context"
	"maps"
	"slices"
	"strings"
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
	s.unlockAndNotify(&p)
}

// RemoveProxy takes a proxy out of the fleet. Its live leases stay until
// released or expired (the holder finds out when the proxy stops answering);
// its cooldowns are kept in case a proxy of the same name comes back.
func (s *Store) RemoveProxy(key ProxyKey) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	if e := s.proxies[key]; e != nil && !e.removed {
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
