package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

var ladder = []map[string]string{{"tier": "cheap"}, {"tier": "premium"}}

func ladderFleet(t *testing.T, opts Options) (*Store, func(time.Duration)) {
	t.Helper()
	s, fc := newTestStore(t, opts)
	s.UpsertProxy(px("ns", "c1", 1, "tier", "cheap"))
	s.UpsertProxy(px("ns", "c2", 2, "tier", "cheap"))
	s.UpsertProxy(px("ns", "p1", 1, "tier", "premium"))
	s.UpsertProxy(px("ns", "p2", 2, "tier", "premium"))
	return s, fc.Step
}

// TestLadderClimbsOnlyWhenATierCools: a lease takes its first tier while
// any proxy of it can serve the target, even a busy one (it waits rather
// than spend a costly proxy); it climbs once every proxy of the tier cools
// for the target, records the tier, and steps back down when the
// cooldowns end. Another target is not moved by the first one's
// cooldowns.
func TestLadderClimbsOnlyWhenATierCools(t *testing.T) {
	s, step := ladderFleet(t, Options{CooldownWindow: time.Minute})
	req := AcquireRequest{Selectors: ladder, Target: "shop.example", Holder: "h"}
	type got struct {
		Proxy string
		Tier  int
	}
	acquire := func() got {
		t.Helper()
		l := mustAcquire(t, s, req)
		return got{l.Proxy.Name, l.Tier}
	}
	first := mustAcquire(t, s, req)
	second := mustAcquire(t, s, req)
	if d := cmp.Diff([]got{{"c1", 0}, {"c2", 0}}, []got{{first.Proxy.Name, first.Tier}, {second.Proxy.Name, second.Tier}}); d != "" {
		t.Fatalf("the cheap tier first (-want +got):\n%s", d)
	}
	// c1 is banned for the site; c2 is busy, not banned: the tier still
	// serves the site, so the request waits for it.
	if err := s.Report(first.ID, ResultBanned, "shop.example"); err != nil {
		t.Fatal(err)
	}
	s.Release(first.ID)
	_, err := s.Acquire(req)
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.Tier != 0 || nm.InCooldown != 1 || nm.AtCapacity != 1 {
		t.Fatalf("cheap tier busy and half banned: %v, want a no match on tier 0 (1 cooling, 1 at capacity)", err)
	}
	// c2 banned too: every cheap proxy cools for the site: climb.
	if err := s.Report(second.ID, ResultBanned, "shop.example"); err != nil {
		t.Fatal(err)
	}
	s.Release(second.ID)
	climbed := mustAcquire(t, s, req)
	if climbed.Proxy.Name != "p1" || climbed.Tier != 1 {
		t.Fatalf("every cheap proxy cooling: %s on tier %d, want p1 on tier 1", climbed.Proxy.Name, climbed.Tier)
	}
	if g := acquire(); g != (got{"p2", 1}) {
		t.Fatalf("the next: %+v, want p2 on tier 1", g)
	}
	// Another site is not moved.
	if l := mustAcquire(t, s, AcquireRequest{Selectors: ladder, Target: "other.example"}); l.Tier != 0 {
		t.Fatalf("another site climbed to tier %d", l.Tier)
	}
	// The last tier full: a no match on tier 1.
	if _, err := s.Acquire(req); !errors.As(err, &nm) || nm.Tier != 1 || nm.AtCapacity != 2 {
		t.Fatalf("premium full: %v, want a no match on tier 1, 2 at capacity", err)
	}
	// The cooldowns end: back down.
	s.Release(climbed.ID)
	step(time.Minute + time.Second)
	if g := acquire(); g.Tier != 0 {
		t.Fatalf("after the cooldown window: %+v, want the cheap tier", g)
	}
}

// TestLadderClimbsPastATierThatCannotServe: a tier whose proxies are all
// unhealthy, draining or absent is passed as one that cools; a request
// without a ladder never climbs.
func TestLadderClimbsPastATierThatCannotServe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cheap func(p ProxyInfo) ProxyInfo
	}{
		{"unhealthy", unhealthy},
		{"draining", func(p ProxyInfo) ProxyInfo { p.Draining = true; return p }},
		{"absent", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestStore(t, Options{})
			if tc.cheap != nil {
				s.UpsertProxy(tc.cheap(px("ns", "c1", 1, "tier", "cheap")))
			}
			s.UpsertProxy(px("ns", "p1", 1, "tier", "premium"))
			l := mustAcquire(t, s, AcquireRequest{Selectors: ladder, Target: "shop.example"})
			if l.Proxy.Name != "p1" || l.Tier != 1 {
				t.Fatalf("granted %s on tier %d, want p1 on tier 1", l.Proxy.Name, l.Tier)
			}
			if _, err := s.Acquire(AcquireRequest{Selector: ladder[0], Target: "shop.example"}); !IsNoMatch(err) {
				t.Fatalf("without a ladder: %v, want a no match", err)
			}
		})
	}
}

// TestLadderTierBudget: a SitePolicy's higherTiers bound the site's leases
// on each higher tier; the refusal names the tier; an end frees the slot;
// every tier counts against the policy's limit; a tier of budget 0 is never
// climbed to; status shows the tier in use and the live leases per tier.
func TestLadderTierBudget(t *testing.T) {
	s, _ := ladderFleet(t, Options{CooldownWindow: time.Minute, MaxLeasesPerProxy: 5})
	req := AcquireRequest{Selectors: ladder, Target: "shop.example"}
	// Cool the cheap tier for the site (before the policy: bans would cut
	// its rate).
	for _, name := range []string{"c1", "c2"} {
		l := mustAcquire(t, s, AcquireRequest{Selector: map[string]string{"tier": "cheap"}, Target: "shop.example"})
		if l.Proxy.Name != name {
			t.Fatalf("cooling %s: leased %s", name, l.Proxy.Name)
		}
		if err := s.Report(l.ID, ResultBanned, "shop.example"); err != nil {
			t.Fatal(err)
		}
		s.Release(l.ID)
	}
	pol := sitePolicy("shop", 3, "shop.example")
	pol.HigherTiers = []int{2}
	s.SetSitePolicies([]sites.Policy{pol})
	a, b := mustAcquire(t, s, req), mustAcquire(t, s, req)
	if a.Tier != 1 || b.Tier != 1 {
		t.Fatalf("tiers %d, %d: want 1, 1", a.Tier, b.Tier)
	}
	_, err := s.Acquire(req)
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.Site == nil || nm.Site.Tier != 1 || nm.Site.Limit != 2 || nm.Site.Live != 2 {
		t.Fatalf("the third on tier 1: %v, want refused by the tier's budget of 2", err)
	}
	var busy *SiteBusyError
	if _, err := s.TryAcquire(req); !errors.As(err, &busy) || busy.Refusal.Tier != 1 {
		t.Fatalf("TryAcquire: %v, want a SiteBusyError on tier 1", err)
	}
	if d := s.Diagnose(req); d.Site == nil || d.Site.Tier != 1 || d.Tier != 1 {
		t.Fatalf("Diagnose: %+v, want the tier's refusal", d)
	}
	st := s.SiteStatuses()
	if len(st) != 1 || st[0].Tier != 1 || !cmp.Equal(st[0].TierLive, []int{0, 2}) || st[0].Live != 2 {
		t.Fatalf("status %+v, want tier 1, tierLive [0 2], 2 live", st)
	}
	// The cheap tier's leases count against the limit with the others: a
	// lease for the site without a ladder fills the limit of 3.
	other := mustAcquire(t, s, AcquireRequest{Selector: map[string]string{"tier": "premium"}, Target: "shop.example"})
	if _, err := s.Acquire(AcquireRequest{Target: "shop.example"}); !errors.As(err, &nm) || nm.Site == nil || nm.Site.Tier != 0 {
		t.Fatalf("over the limit: %v, want refused by the limit", err)
	}
	s.Release(other.ID)
	s.Release(a.ID)
	if l := mustAcquire(t, s, req); l.Tier != 1 {
		t.Fatalf("after an end: tier %d", l.Tier)
	}

	// A budget of 0 keeps the site off the tier.
	pol.HigherTiers = []int{0}
	s.SetSitePolicies([]sites.Policy{pol})
	s.Release(b.ID)
	if _, err := s.Acquire(req); !errors.As(err, &nm) || nm.Site == nil || nm.Site.Tier != 1 || nm.Site.Limit != 0 {
		t.Fatalf("budget 0: %v, want refused on tier 1", err)
	}
}

// TestGrantCheckerCatchesABadClimb is the negative control of the ladder's
// check in the invariant and property tests: a grant on tier 1 while tier 0
// still serves the target, or over the tier's budget, is recorded.
func TestGrantCheckerCatchesABadClimb(t *testing.T) {
	s, _ := ladderFleet(t, Options{})
	pol := sitePolicy("shop", 3, "shop.example")
	pol.HigherTiers = []int{0}
	s.SetSitePolicies([]sites.Policy{pol})
	var got []string
	check := grantChecker(s, func(v string) { got = append(got, v) })
	req := &AcquireRequest{Selectors: ladder, Target: "shop.example"}
	s.mu.Lock()
	check(s.proxies[ProxyKey{Namespace: "ns", Name: "p1"}], req, 1, s.now())
	s.mu.Unlock()
	want := []string{
		`granted ns/p1 for "shop.example" over SitePolicy shop's budget of tier 1 (0 live of 0)`,
		`granted ns/p1 for "shop.example" on tier 1 while tier 0 still serves the target`,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("recorded (-want +got):\n%s", d)
	}
}
