package lease

import (
	"time"

	"github.com/google/btree"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// indexKey names one index set: every proxy of a namespace ("" = all
// namespaces), or those of them carrying attribute k=v.
type indexKey struct {
	ns   string
	attr bool
	k, v string
}

// lessEntry is the selection order: fewest live leases, then lowest latency,
// then name (and namespace, to make the order total across namespaces).
func lessEntry(a, b *proxyEntry) bool {
	if a.leases != b.leases {
		return a.leases < b.leases
	}
	if a.info.LatencyMillis != b.info.LatencyMillis {
		return a.info.LatencyMillis < b.info.LatencyMillis
	}
	if a.info.Name != b.info.Name {
		return a.info.Name < b.info.Name
	}
	return a.info.Namespace < b.info.Namespace
}

// btreeDegree: small nodes suit pointer items that move on every grant and
// release (google/btree's own benchmarks use 32; 16 keeps node copies short).
const btreeDegree = 16

func keysFor(info ProxyInfo) []indexKey {
	keys := make([]indexKey, 0, 2*(len(info.Attributes)+1))
	keys = append(keys, indexKey{ns: info.Namespace})
	if info.Namespace != "" {
		keys = append(keys, indexKey{})
	}
	for k, v := range info.Attributes {
		keys = append(keys, indexKey{ns: info.Namespace, attr: true, k: k, v: v})
		if info.Namespace != "" {
			keys = append(keys, indexKey{attr: true, k: k, v: v})
		}
	}
	return keys
}

func (s *Store) eligible(e *proxyEntry) bool {
	return !e.removed && e.info.Healthy && !e.info.Draining && e.leases < s.opts.MaxLeasesPerProxy && !e.globalCooling
}

func (s *Store) indexLocked(e *proxyEntry) {
	if e.indexed || !s.eligible(e) {
		return
	}
	for _, t := range e.trees {
		t.ReplaceOrInsert(e)
	}
	e.indexed = true
	s.free++
}

func (s *Store) unindexLocked(e *proxyEntry) {
	if !e.indexed {
		return
	}
	for _, t := range e.trees {
		t.Delete(e)
	}
	e.indexed = false
	s.free--
}

// treeLocked returns the avail tree of k, building it on first use; nil when
// no proxy of the fleet has key k.
func (s *Store) treeLocked(k indexKey) *btree.BTreeG[*proxyEntry] {
	if t := s.avail[k]; t != nil {
		return t
	}
	m := s.members[k]
	if len(m) == 0 {
		return nil
	}
	t := btree.NewG(btreeDegree, lessEntry)
	for e := range m {
		e.trees = append(e.trees, t)
		if e.indexed {
			t.ReplaceOrInsert(e)
		}
	}
	s.avail[k] = t
	return t
}

// setLeasesLocked changes e's lease count, which is part of the index order.
func (s *Store) setLeasesLocked(e *proxyEntry, n int) {
	s.unindexLocked(e)
	e.leases = n
	s.indexLocked(e)
}

// attachLocked counts le, a new live lease, on its proxy.
func (s *Store) attachLocked(le *leaseEntry) {
	e := le.proxy
	if e.live == nil {
		e.live = make(map[*leaseEntry]struct{})
	}
	e.live[le] = struct{}{}
	s.setLeasesLocked(e, e.leases+1)
	if le.site = s.sites.For(le.Target); le.site != nil {
		le.site.Attach(le.Tier)
	}
}

// detachLocked uncounts le, a lease that ended, from its proxy.
func (s *Store) detachLocked(le *leaseEntry) {
	e := le.proxy
	delete(e.live, le)
	s.setLeasesLocked(e, e.leases-1)
}

// addMembersLocked requires e to be unindexed.
func (s *Store) addMembersLocked(e *proxyEntry) {
	e.trees = e.trees[:0]
	for _, k := range e.keys {
		m := s.members[k]
		if m == nil {
			m = map[*proxyEntry]struct{}{}
			s.members[k] = m
		}
		m[e] = struct{}{}
		if t := s.avail[k]; t != nil {
			e.trees = append(e.trees, t)
		}
	}
}

// removeMembersLocked requires e to be unindexed.
func (s *Store) removeMembersLocked(e *proxyEntry) {
	for _, k := range e.keys {
		m := s.members[k]
		delete(m, e)
		if len(m) == 0 {
			delete(s.members, k)
			delete(s.avail, k)
		}
	}
	e.trees = e.trees[:0]
}

func (s *Store) forgetIfUnusedLocked(e *proxyEntry) {
	if e.removed && e.leases == 0 && len(e.cooldowns) == 0 && s.proxies[e.key] == e {
		delete(s.proxies, e.key)
	}
}

// entryLocked returns the entry for key, creating a removed placeholder when
// the proxy is gone (a late report must still start a cooldown).
func (s *Store) entryLocked(key ProxyKey) *proxyEntry {
	if e := s.proxies[key]; e != nil {
		return e
	}
	e := &proxyEntry{key: key, info: ProxyInfo{Namespace: key.Namespace, Name: key.Name}, removed: true}
	s.proxies[key] = e
	return e
}

func (e *proxyEntry) coolingFor(target string, now time.Time) bool {
	if len(e.cooldowns) == 0 {
		return false
	}
	c, ok := e.cooldowns[target]
	return ok && c.until.After(now)
}

func matches(e *proxyEntry, selector map[string]string) bool {
	return crawlv1alpha1.SelectorMatches(selector, e.info.Attributes)
}

// selectLocked is the proxy req gets now on selector sel (req's, or one
// of its ladder's), or nil: the best of every namespace req may use
// (selectInLocked). site is the budget of req's target (nil: none).
func (s *Store) selectLocked(req *AcquireRequest, sel map[string]string, site *sites.Budget, now time.Time) *proxyEntry {
	if req.Namespace != "" || req.Namespaces == nil {
		return s.selectInLocked(req.Namespace, req, sel, site, now)
	}
	var found *proxyEntry
	for _, ns := range req.Namespaces {
		if e := s.selectInLocked(ns, req, sel, site, now); e != nil && (found == nil || lessEntry(e, found)) {
			found = e
		}
	}
	return found
}

// selectInLocked is the first proxy of namespace ns ("" = any) in selection
// order that can take req now.
func (s *Store) selectInLocked(ns string, req *AcquireRequest, sel map[string]string, site *sites.Budget, now time.Time) *proxyEntry {
	best := s.treeLocked(indexKey{ns: ns})
	if best == nil {
		return nil
	}
	for k, v := range sel {
		t := s.treeLocked(indexKey{ns: ns, attr: true, k: k, v: v})
		if t == nil {
			return nil
		}
		if t.Len() < best.Len() {
			best = t
		}
	}
	var found *proxyEntry
	// Walk in selection order; the first proxy passing the remaining checks is
	// the answer. Only the other selector pairs, per-target cooldowns and the
	// site's spacing of one proxy's grants are checked here (capacity, health
	// and global cooldown are the index itself).
	spaced := site != nil && site.Spaced()
	best.Ascend(func(e *proxyEntry) bool {
		if !matches(e, sel) || (req.Target != "" && e.coolingFor(req.Target, now)) ||
			(spaced && !site.ProxyReady(e.key.String(), now)) {
			return true
		}
		found = e
		return false
	})
	return found
}

// explainLocked counts why no proxy of the namespaces req may use took it
// on selector sel, under site's budget (nil: none).
func (s *Store) explainLocked(req *AcquireRequest, sel map[string]string, site *sites.Budget, now time.Time) *NoMatchError {
	if req.Namespace != "" || req.Namespaces == nil {
		return s.explainInLocked(req.Namespace, req, sel, site, now)
	}
	var c NoMatchError
	for _, ns := range req.Namespaces {
		n := s.explainInLocked(ns, req, sel, site, now)
		c.Considered += n.Considered
		c.AtCapacity += n.AtCapacity
		c.InCooldown += n.InCooldown
		c.Unhealthy += n.Unhealthy
		c.Free += n.Free
	}
	return &c
}

func (s *Store) explainInLocked(ns string, req *AcquireRequest, sel map[string]string, site *sites.Budget, now time.Time) *NoMatchError {
	var c NoMatchError
	for e := range s.candidatesLocked(ns, sel) {
		if !matches(e, sel) {
			continue
		}
		c.Considered++
		// Cooling before capacity: a proxy cooling for the target is of no
		// use to this request even once it frees, so only proxies a wait can
		// bring count as at capacity.
		switch {
		case !e.info.Healthy:
			c.Unhealthy++
		case e.globalCooling || (req.Target != "" && e.coolingFor(req.Target, now)):
			c.InCooldown++
		case e.leases >= s.opts.MaxLeasesPerProxy, e.info.Draining,
			site != nil && site.Spaced() && !site.ProxyReady(e.key.String(), now):
			// A proxy within the site's interval since its last grant for
			// it is brought by a wait, as a leased one.
			c.AtCapacity++
		default:
			c.Free++
		}
	}
	return &c
}

// candidatesLocked is the smallest member set of namespace ns ("" = any)
// holding every proxy that matches sel (a superset: check matches).
func (s *Store) candidatesLocked(ns string, sel map[string]string) map[*proxyEntry]struct{} {
	set := s.members[indexKey{ns: ns}]
	for k, v := range sel {
		m := s.members[indexKey{ns: ns, attr: true, k: k, v: v}]
		if len(m) < len(set) {
			set = m
		}
	}
	return set
}
