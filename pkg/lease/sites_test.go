package lease

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

func sitePolicy(name string, maxC int, sitesList ...string) sites.Policy {
	return sites.Policy{Name: name, Sites: sitesList, MinConcurrency: 1, MaxConcurrency: maxC,
		IncreaseInterval: 5 * time.Second, DecreaseFactor: 0.5}
}

// TestSiteBudget: a site policy bounds the live leases for its sites over
// the whole fleet (every holder together), whatever proxies are free; a
// refused request is a no match that says the site's budget; other sites
// are untouched; an ended lease frees a slot and wakes the queue; a
// rate_limited report cuts the limit (once per signal); the limit grows back
// after the interval, announced by NextChange and the capacity hook;
// policies set while leases live count them; no policy, no bound.
func TestSiteBudget(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxLeasesPerProxy: 10, CooldownWindow: time.Minute})
	for _, n := range []string{"a", "b", "c", "d"} {
		s.UpsertProxy(px("ns", n, 1))
	}
	var woken atomic.Int32
	s.OnCapacity(func() { woken.Add(1) })
	if conflicts := s.SetSitePolicies([]sites.Policy{sitePolicy("shop", 4, "*.shop.example")}); len(conflicts) != 0 {
		t.Fatalf("conflicts: %v", conflicts)
	}
	req := func(holder string) AcquireRequest {
		return AcquireRequest{Target: "www.shop.example", Holder: holder, Flow: holder}
	}
	var held []*Lease
	for i := range 4 {
		held = append(held, mustAcquire(t, s, req([]string{"alice", "bob"}[i%2])))
	}
	_, err := s.Acquire(req("carol"))
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.Site == nil || nm.Site.Policy != "shop" || nm.Site.Limit != 4 {
		t.Fatalf("the 5th lease for the site: %v, want a no match naming SitePolicy shop at 4", err)
	}
	if _, err := s.TryAcquire(req("carol")); !IsNoMatch(err) {
		t.Fatalf("TryAcquire over the budget: %v, want a no match", err)
	}
	if _, err := s.Acquire(AcquireRequest{Target: "other.example", Holder: "carol"}); err != nil {
		t.Fatalf("another site: %v", err)
	}

	// An end frees a slot and wakes the queue.
	woken.Store(0)
	if !s.Release(held[0].ID) {
		t.Fatal("releasing a live lease")
	}
	if woken.Load() == 0 {
		t.Fatal("a lease for the site ended without a capacity event")
	}
	held[0] = mustAcquire(t, s, req("carol"))

	// Reports: the first cuts 4 → 2; more on leases granted before it do not.
	fc.Step(time.Second)
	for _, l := range held[:3] {
		if err := s.ReportAs(l.Holder, l.ID, ResultRateLimited, "www.shop.example"); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.SiteStatuses(); len(st) != 1 || st[0].Limit != 2 || st[0].Live != 4 || st[0].Cuts != 1 {
		t.Fatalf("after three reports of one signal: %+v, want limit 2, 4 live, 1 cut", st)
	}
	// rate_limited on a policed site cooled no proxy (the site's limit is on
	// everyone); banned cools its proxy as ever.
	if until, err := s.CoolingAs(held[0].Holder, held[0].ID, "www.shop.example"); err != nil || !until.IsZero() {
		t.Fatalf("a proxy reported rate_limited for a policed site cools until %v (%v), want not at all", until, err)
	}
	if err := s.ReportAs(held[3].Holder, held[3].ID, ResultBanned, "www.shop.example"); err != nil {
		t.Fatal(err)
	}
	if until, _ := s.CoolingAs(held[3].Holder, held[3].ID, "www.shop.example"); until.IsZero() {
		t.Fatal("a proxy reported banned for a policed site does not cool")
	}
	for _, l := range held {
		_ = s.Release(l.ID)
	}
	held = held[:0]
	for range 2 {
		held = append(held, mustAcquire(t, s, req("alice")))
	}
	if _, err := s.TryAcquire(req("bob")); !IsNoMatch(err) {
		t.Fatalf("over the cut limit: %v", err)
	}
	// In full use: the raise is due the interval after the cut.
	if next := s.NextChange(); !next.Equal(t0.Add(6 * time.Second)) {
		t.Fatalf("NextChange %v, want the raise at %v", next, t0.Add(6*time.Second))
	}
	woken.Store(0)
	fc.Step(5 * time.Second)
	s.Sweep()
	if woken.Load() == 0 {
		t.Fatal("the raise fired no capacity event")
	}
	mustAcquire(t, s, req("bob"))

	// A policy set while leases live counts them.
	s.SetSitePolicies([]sites.Policy{sitePolicy("shop", 2, "*.shop.example")})
	if st := s.SiteStatuses(); st[0].Live != 3 || st[0].Limit != 2 {
		t.Fatalf("after the update: %+v, want the 3 live leases counted at limit 2", st)
	}
	// No policy: no bound.
	s.SetSitePolicies(nil)
	for range 3 {
		mustAcquire(t, s, req("dave"))
	}
}

// TestSiteProxyInterval: under a policy with a proxy interval, a proxy
// granted for the site is not granted for it again before the interval
// passes, even with room on it: the next lease takes another proxy; with
// every proxy spaced the request is a no match counting them as a wait
// brings them (at capacity); NextChange and the capacity hook announce the
// interval's end; another site is not spaced; the grant checker would
// catch a grant within the interval.
func TestSiteProxyInterval(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxLeasesPerProxy: 10})
	s.UpsertProxy(px("ns", "a", 1))
	s.UpsertProxy(px("ns", "b", 2))
	var violations []string
	probeOf(s).onGrant = grantChecker(s, func(v string) { violations = append(violations, v) })
	pol := sitePolicy("shop", 10, "shop.example")
	pol.ProxyInterval = time.Second
	s.SetSitePolicies([]sites.Policy{pol})
	var woken atomic.Int32
	s.OnCapacity(func() { woken.Add(1) })
	req := AcquireRequest{Target: "shop.example"}
	if l := mustAcquire(t, s, req); l.Proxy.Name != "a" {
		t.Fatalf("first: %s, want a", l.Proxy.Name)
	}
	if l := mustAcquire(t, s, req); l.Proxy.Name != "b" {
		t.Fatalf("second: %s, want b (a was granted for the site just now)", l.Proxy.Name)
	}
	_, err := s.Acquire(req)
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.Considered != 2 || nm.AtCapacity != 2 || nm.Site != nil {
		t.Fatalf("third: %v, want a no match with both proxies counted at capacity", err)
	}
	if l := mustAcquire(t, s, AcquireRequest{Target: "other.example"}); l.Proxy.Name != "a" {
		t.Fatalf("another site: %s, want a", l.Proxy.Name)
	} else {
		s.Release(l.ID)
	}
	if got := s.NextChange(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextChange = %v, want the interval's end %v", got, t0.Add(time.Second))
	}
	woken.Store(0)
	fc.Step(time.Second)
	s.Sweep()
	if woken.Load() == 0 {
		t.Fatal("the interval passed without a capacity event")
	}
	if l := mustAcquire(t, s, req); l.Proxy.Name != "a" {
		t.Fatalf("after the interval: %s, want a (one lease each, a the faster)", l.Proxy.Name)
	}
	if len(violations) > 0 {
		t.Fatalf("the grant checker flagged the store: %q", violations)
	}
	// The checker's negative control: a grant of a now, within its interval.
	s.mu.Lock()
	grantChecker(s, func(v string) { violations = append(violations, v) })(s.proxies[ProxyKey{Namespace: "ns", Name: "a"}], &req, 0, s.now())
	s.mu.Unlock()
	if len(violations) != 1 || !strings.Contains(violations[0], "within SitePolicy shop's interval") {
		t.Errorf("a grant within the interval: checker said %q", violations)
	}
}
