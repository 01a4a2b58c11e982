package lease

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// checkInvariants inspects the store's internals; the caller holds s.mu.
// It returns one line per violated invariant.
func checkInvariants(s *Store) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	// Lease table ↔ per-proxy counts, capacity, names, flows, expiry heap.
	perProxy := map[*proxyEntry]int{}
	perFlow := map[string]int{}
	perHolder := map[string]int{}
	named := 0
	for id, le := range s.leases {
		if le.ID != id {
			fail("lease %s stored under %s", le.ID, id)
		}
		perProxy[le.proxy]++
		perFlow[le.Flow]++
		perHolder[le.Holder]++
		if s.proxies[le.proxy.key] != le.proxy {
			fail("lease %s points at proxy %s the store forgot", id, le.proxy.key)
		}
		if got, _ := s.nameLocked(ProxyKey{Namespace: le.Namespace, Name: le.Name}); got != id {
			fail("lease %s: name %s/%s not mapped to it", id, le.Namespace, le.Name)
		}
		if le.Name != le.ID {
			named++
		} else if _, ok := s.names[ProxyKey{Namespace: le.Namespace, Name: le.Name}]; ok {
			fail("lease %s named by its ID has an entry in names", id)
		}
		if le.heapIndex < 0 || le.heapIndex >= len(s.expiries) || s.expiries[le.heapIndex] != le {
			fail("lease %s is not in the expiry heap at its index %d", id, le.heapIndex)
		}
		if _, ok := s.tombs[id]; ok {
			fail("lease %s is both live and ended", id)
		}
	}
	if len(s.expiries) != len(s.leases) {
		fail("expiry heap has %d entries, lease table %d", len(s.expiries), len(s.leases))
	}
	for i := 1; i < len(s.expiries); i++ {
		if s.expiries.Less(i, (i-1)/2) {
			fail("expiry heap order broken at %d", i)
		}
	}
	if len(s.names) != named {
		fail("names has %d entries, %d leases are named other than by their ID", len(s.names), named)
	}
	for f, n := range s.flows {
		if perFlow[f] != n {
			fail("flow %q: HeldBy %d, lease table %d", f, n, perFlow[f])
		}
	}
	for f, n := range perFlow {
		if s.flows[f] != n {
			fail("flow %q: lease table %d, HeldBy %d", f, n, s.flows[f])
		}
	}
	if !maps.Equal(perHolder, s.holders) {
		fail("leases per holder %v, HeldByHolder counts %v", perHolder, s.holders)
	}

	// Site budgets: each lease counts against its target's policy, and each
	// budget's live count is its leases.
	perSite := map[*sites.Budget]int{}
	perTier := map[*sites.Budget]*[sites.MaxTiers]int{}
	for id, le := range s.leases {
		if want := s.sites.For(le.Target); le.site != want {
			fail("lease %s for %q counts against the wrong site budget", id, le.Target)
		}
		if le.Tier < 0 || le.Tier >= sites.MaxTiers {
			fail("lease %s on tier %d", id, le.Tier)
			continue
		}
		if le.site != nil {
			perSite[le.site]++
			if perTier[le.site] == nil {
				perTier[le.site] = new([sites.MaxTiers]int)
			}
			perTier[le.site][le.Tier]++
		}
	}
	for _, b := range s.sites.Budgets() {
		if b.Live() != perSite[b] {
			fail("site policy %s: %d live counted, lease table %d", b.Policy().Name, b.Live(), perSite[b])
		}
		for tier := range sites.MaxTiers {
			n := 0
			if perTier[b] != nil {
				n = perTier[b][tier]
			}
			if b.TierLive(tier) != n {
				fail("site policy %s: %d live counted on tier %d, lease table %d", b.Policy().Name, b.TierLive(tier), tier, n)
			}
		}
	}

	// Proxies: counts, capacity, index membership, members.
	indexed := 0
	for key, e := range s.proxies {
		if e.key != key {
			fail("proxy %s stored under %s", e.key, key)
		}
		if e.leases != perProxy[e] {
			fail("proxy %s: count %d, lease table %d", key, e.leases, perProxy[e])
		}
		if perProxy[e] > s.opts.MaxLeasesPerProxy {
			fail("proxy %s has %d live leases, capacity %d", key, perProxy[e], s.opts.MaxLeasesPerProxy)
		}
		if _, ok := e.cooldowns[""]; ok != e.globalCooling {
			fail("proxy %s: globalCooling %v but global cooldown present %v", key, e.globalCooling, ok)
		}
		if e.indexed != s.eligible(e) {
			fail("proxy %s: indexed %v, eligible %v", key, e.indexed, s.eligible(e))
		}
		built := 0
		for _, k := range e.keys {
			if t := s.avail[k]; t != nil && !e.removed {
				built++
				if !slices.Contains(e.trees, t) {
					fail("proxy %s: built tree %+v missing from its tree list", key, k)
				}
				if t.Has(e) != e.indexed {
					fail("proxy %s: in index %+v = %v, indexed %v", key, k, t.Has(e), e.indexed)
				}
			}
			_, member := s.members[k][e]
			if member == e.removed {
				fail("proxy %s: member of %+v = %v, removed %v", key, k, member, e.removed)
			}
		}
		if built != len(e.trees) {
			fail("proxy %s: %d trees listed, %d built for its keys", key, len(e.trees), built)
		}
		if e.indexed {
			indexed += built
		}
	}
	total := 0
	for _, t := range s.avail {
		total += t.Len()
	}
	if total != indexed {
		fail("index holds %d entries, indexed proxies account for %d", total, indexed)
	}
	// Cooldowns per holder: counted as they run, never over the limit.
	cooling := map[string]int{}
	for _, e := range s.proxies {
		for _, c := range e.cooldowns {
			if c.holder != "" {
				cooling[c.holder]++
			}
		}
	}
	if !maps.Equal(cooling, s.cooledBy) {
		fail("cooldowns per holder %v, counted %v", cooling, s.cooledBy)
	}
	for h, n := range cooling {
		if n > s.opts.MaxCooldownsPerHolder {
			fail("holder %q runs %d cooldowns, limit %d", h, n, s.opts.MaxCooldownsPerHolder)
		}
	}

	// Ended leases: each in tombQ and its holder's queue once, counted per
	// holder, never over the limit; tombQ's forgotten ones counted.
	ended := map[string]int{}
	for id, t := range s.tombs {
		ended[t.holder]++
		if t.id != id || t.gone {
			fail("ended lease %s stored under %s (gone %v)", t.id, id, t.gone)
		}
		if id2, ok := s.tombNames[t.name]; ok && (s.tombs[id2] == nil || s.tombs[id2].name != t.name) {
			fail("tombNames maps %s to %s, which is not of that name", t.name, id2)
		}
	}
	queued, gone := map[*tombstone]int{}, 0
	for _, t := range s.tombQ[s.tombHead:] {
		if t.gone {
			gone++
		} else {
			queued[t]++
		}
	}
	if gone != s.tombGone {
		fail("tombQ holds %d forgotten ended leases, counted %d", gone, s.tombGone)
	}
	live := map[string]int{}
	for h, q := range s.tombsOf {
		for _, t := range q.q[q.head:] {
			if !t.gone {
				live[h]++
				if t.holder != h || t.of != q {
					fail("ended lease %s of %q queued for %q", t.id, t.holder, h)
				}
			}
		}
		if q.live != live[h] {
			fail("holder %q: %d ended leases queued, counted %d", h, live[h], q.live)
		}
	}
	if !maps.Equal(ended, live) {
		fail("ended leases per holder %v, queued %v", ended, live)
	}
	for id, t := range s.tombs {
		if queued[t] != 1 {
			fail("ended lease %s is in tombQ %d times", id, queued[t])
		}
	}
	for h, n := range ended {
		if n > s.opts.MaxEndedPerHolder {
			fail("holder %q has %d ended leases, limit %d", h, n, s.opts.MaxEndedPerHolder)
		}
	}
	return bad
}

// grantChecker returns an onGrant hook that records a violation whenever a
// lease is granted on a proxy that cannot take it at grant time, over its
// site's budget, or on a tier of its ladder it had no cause to climb to.
func grantChecker(s *Store, record func(string)) func(e *proxyEntry, req *AcquireRequest, tier int, now time.Time) {
	return func(e *proxyEntry, req *AcquireRequest, tier int, now time.Time) {
		sel := req.tiers()[tier]
		switch {
		case e.leases >= s.opts.MaxLeasesPerProxy:
			record(fmt.Sprintf("granted %s at capacity (%d leases)", e.key, e.leases))
		case !e.info.Healthy || e.removed:
			record(fmt.Sprintf("granted %s while unhealthy or removed", e.key))
		case e.coolingFor("", now):
			record(fmt.Sprintf("granted %s while it cools down for every target", e.key))
		case req.Target != "" && e.coolingFor(req.Target, now):
			record(fmt.Sprintf("granted %s for %q while that pair cools down", e.key, req.Target))
		case req.Namespace != "" && e.info.Namespace != req.Namespace, !matches(e, sel):
			record(fmt.Sprintf("granted %s outside namespace/selector %s %v", e.key, req.Namespace, sel))
		}
		b := s.sites.For(req.Target)
		if b != nil && b.Live() >= b.Limit() {
			record(fmt.Sprintf("granted %s for %q over SitePolicy %s's limit (%d live of %d)", e.key, req.Target, b.Policy().Name, b.Live(), b.Limit()))
		}
		if b != nil && b.Spaced() && !b.ProxyReady(e.key.String(), now) {
			record(fmt.Sprintf("granted %s for %q within SitePolicy %s's interval since its last grant for the site", e.key, req.Target, b.Policy().Name))
		}
		if b != nil && tier > 0 && tier <= len(b.Policy().HigherTiers) && b.TierLive(tier) >= b.Policy().HigherTiers[tier-1] {
			record(fmt.Sprintf("granted %s for %q over SitePolicy %s's budget of tier %d (%d live of %d)",
				e.key, req.Target, b.Policy().Name, tier, b.TierLive(tier), b.Policy().HigherTiers[tier-1]))
		}
		for lower := range tier {
			if s.servesLocked(req, req.tiers()[lower], now) {
				record(fmt.Sprintf("granted %s for %q on tier %d while tier %d still serves the target", e.key, req.Target, tier, lower))
			}
		}
	}
}

type noopLocker struct{}

func (noopLocker) Lock()   {}
func (noopLocker) Unlock() {}

// Negative control: the same store with its lock removed and one
// deterministic interleaving (a second Acquire between the first one's
// selection and its insert) double-grants a proxy, and both checkers say so.
func TestInvariantCheckerCatchesStoreWithoutLock(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxLeasesPerProxy: 1})
	s.mu = noopLocker{}
	var grants []string
	probeOf(s).onGrant = grantChecker(s, func(v string) { grants = append(grants, v) })
	s.UpsertProxy(px("ns", "p", 1))
	nested := false
	probeOf(s).afterSelect = func() {
		if nested {
			return
		}
		nested = true
		if _, err := s.Acquire(AcquireRequest{}); err != nil {
			t.Errorf("interleaved acquire: %v", err)
		}
	}
	if _, err := s.Acquire(AcquireRequest{}); err != nil {
		t.Fatalf("outer acquire: %v", err)
	}
	bad := checkInvariants(s)
	if !containsLine(bad, "proxy ns/p has 2 live leases, capacity 1") {
		t.Errorf("checker missed the double grant; it said %q", bad)
	}
	if !containsLine(grants, "granted ns/p at capacity") {
		t.Errorf("grant checker missed the double grant; it said %q", grants)
	}
}

// Positive twin of the control above: with the real lock, the interleaved
// Acquire (on another goroutine) waits for the first to finish and finds no
// capacity; the checkers stay silent.
func TestLockSerialisesTheSameInterleaving(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxLeasesPerProxy: 1})
	var grants []string
	probeOf(s).onGrant = grantChecker(s, func(v string) { grants = append(grants, v) })
	s.UpsertProxy(px("ns", "p", 1))
	second := make(chan error, 1)
	started := false
	probeOf(s).afterSelect = func() {
		if started {
			return
		}
		started = true
		go func() {
			_, err := s.Acquire(AcquireRequest{})
			second <- err
		}()
	}
	if _, err := s.Acquire(AcquireRequest{}); err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	if err := <-second; !IsNoMatch(err) {
		t.Errorf("second acquire: %v, want no match", err)
	}
	s.mu.Lock()
	bad := checkInvariants(s)
	s.mu.Unlock()
	if len(bad) > 0 || len(grants) > 0 {
		t.Errorf("violations with the lock: %q %q", bad, grants)
	}
}

// Each invariant is live: corrupting the state the way a bug would makes the
// checker complain.
func TestInvariantCheckerDetectsCorruption(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(s *Store, l *Lease)
		want    string
	}{
		{"count drift", func(s *Store, l *Lease) { s.proxies[l.Proxy.Key()].leases++ }, "count 2, lease table 1"},
		{"lease lost from heap", func(s *Store, l *Lease) { s.expiries = s.expiries[:0] }, "not in the expiry heap"},
		{"flow drift", func(s *Store, l *Lease) { s.flows["f"] = 5 }, `flow "f": HeldBy 5, lease table 1`},
		{"name lost", func(s *Store, l *Lease) {
			if _, err := s.Acquire(AcquireRequest{Namespace: "ns", Name: "named"}); err != nil {
				panic(err)
			}
			clear(s.names)
		}, "not mapped to it"},
		{"ID name recorded", func(s *Store, l *Lease) { s.names[ProxyKey{Namespace: l.Namespace, Name: l.ID}] = l.ID }, "named by its ID has an entry"},
		{"full proxy left in the index", func(s *Store, l *Lease) {
			e := s.proxies[l.Proxy.Key()]
			for _, t := range e.trees {
				t.ReplaceOrInsert(e)
			}
		}, "in index"},
		{"lease forgotten", func(s *Store, l *Lease) { delete(s.leases, l.ID) }, "count 1, lease table 0"},
		{"ended lease miscounted", func(s *Store, l *Lease) {
			s.Release(l.ID)
			s.tombsOf[""].live++
		}, `holder "": 1 ended leases queued, counted 2`},
		{"ended leases over the limit", func(s *Store, l *Lease) {
			s.Release(l.ID)
			s.opts.MaxEndedPerHolder = 0
		}, `holder "" has 1 ended leases, limit 0`},
		{"site budget drift", func(s *Store, l *Lease) {
			s.SetSitePolicies([]sites.Policy{{Name: "all", Sites: []string{"t.example"}, MinConcurrency: 1, MaxConcurrency: 9,
				IncreaseInterval: time.Second, DecreaseFactor: 0.5}})
			s.sites.For("t.example").Attach(0)
		}, "site policy all: 2 live counted, lease table 1"},
		{"tier budget drift", func(s *Store, l *Lease) {
			s.SetSitePolicies([]sites.Policy{{Name: "all", Sites: []string{"t.example"}, MinConcurrency: 1, MaxConcurrency: 9,
				IncreaseInterval: time.Second, DecreaseFactor: 0.5, HigherTiers: []int{1}}})
			s.leases[l.ID].Tier = 1
		}, "site policy all: 1 live counted on tier 0, lease table 0"},
		{"lease on no budget", func(s *Store, l *Lease) {
			s.SetSitePolicies([]sites.Policy{{Name: "all", Sites: []string{"t.example"}, MinConcurrency: 1, MaxConcurrency: 9,
				IncreaseInterval: time.Second, DecreaseFactor: 0.5}})
			s.leases[l.ID].site = nil
		}, "counts against the wrong site budget"},
		{"ended lease lost from tombQ", func(s *Store, l *Lease) {
			s.Release(l.ID)
			s.tombQ = s.tombQ[:s.tombHead]
		}, "is in tombQ 0 times"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestStore(t, Options{})
			s.UpsertProxy(px("ns", "p", 1, "zone", "x"))
			s.UpsertProxy(px("ns", "q", 2))
			l := mustAcquire(t, s, AcquireRequest{Flow: "f", Target: "t.example"})
			if bad := checkInvariants(s); len(bad) > 0 {
				t.Fatalf("clean store flagged: %q", bad)
			}
			tc.corrupt(s, l)
			if bad := checkInvariants(s); !containsLine(bad, tc.want) {
				t.Errorf("checker said %q, want a line containing %q", bad, tc.want)
			}
		})
	}
}

func containsLine(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}
