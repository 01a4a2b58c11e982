package lease

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSelectionOrder(t *testing.T) {
	type step struct {
		req     AcquireRequest
		release string // lease ID to release before this acquire ("" = none)
		want    string // "ns/name" of the granted proxy, or "" for no match
	}
	tests := []struct {
		name  string
		max   int
		fleet []ProxyInfo
		steps []step
	}{{
		name:  "lowest latency first",
		max:   1,
		fleet: []ProxyInfo{px("a", "p1", 30), px("a", "p2", 10), px("a", "p3", 20)},
		steps: []step{{want: "a/p2"}, {want: "a/p3"}, {want: "a/p1"}, {want: ""}},
	}, {
		name:  "name breaks latency ties",
		max:   1,
		fleet: []ProxyInfo{px("a", "c", 5), px("a", "a", 5), px("a", "b", 5)},
		steps: []step{{want: "a/a"}, {want: "a/b"}, {want: "a/c"}},
	}, {
		name:  "fewest leases before latency",
		max:   2,
		fleet: []ProxyInfo{px("a", "fast", 1), px("a", "slow", 100)},
		steps: []step{{want: "a/fast"}, {want: "a/slow"}, {want: "a/fast"}, {want: "a/slow"}, {want: ""}},
	}, {
		name:  "released proxy comes back first",
		max:   1,
		fleet: []ProxyInfo{px("a", "p1", 1), px("a", "p2", 2)},
		steps: []step{{want: "a/p1"}, {want: "a/p2"}, {release: "l1", want: "a/p1"}},
	}, {
		name:  "unhealthy proxies are never offered",
		max:   1,
		fleet: []ProxyInfo{unhealthy(px("a", "p1", 1)), px("a", "p2", 50)},
		steps: []step{{want: "a/p2"}, {want: ""}},
	}, {
		name:  "selector is a subset match on attributes",
		max:   1,
		fleet: []ProxyInfo{px("a", "p1", 1, "zone", "x", "tier", "gold"), px("a", "p2", 2, "zone", "y"), px("a", "p3", 3, "zone", "x")},
		steps: []step{
			{req: AcquireRequest{Selector: map[string]string{"zone": "x", "tier": "gold"}}, want: "a/p1"},
			{req: AcquireRequest{Selector: map[string]string{"zone": "x"}}, want: "a/p3"},
			{req: AcquireRequest{Selector: map[string]string{"zone": "x"}}, want: ""},
			{req: AcquireRequest{Selector: map[string]string{"zone": "nowhere"}}, want: ""},
			{req: AcquireRequest{}, want: "a/p2"},
		},
	}, {
		name:  "namespace scopes candidates, empty namespace means any",
		max:   1,
		fleet: []ProxyInfo{px("a", "p1", 9), px("b", "p1", 1), px("b", "p2", 2)},
		steps: []step{
			{req: AcquireRequest{Namespace: "a"}, want: "a/p1"},
			{req: AcquireRequest{Namespace: "a"}, want: ""},
			{req: AcquireRequest{}, want: "b/p1"},
			{req: AcquireRequest{Namespace: "b"}, want: "b/p2"},
		},
	}, {
		name:  "same name in two namespaces: namespace breaks the tie",
		max:   1,
		fleet: []ProxyInfo{px("z", "p", 1), px("a", "p", 1)},
		steps: []step{{want: "a/p"}, {want: "z/p"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestStore(t, Options{MaxLeasesPerProxy: tc.max})
			for _, p := range tc.fleet {
				s.UpsertProxy(p)
			}
			for i, st := range tc.steps {
				if st.release != "" && !s.Release(st.release) {
					t.Fatalf("step %d: release %s: not live", i, st.release)
				}
				l, err := s.Acquire(st.req)
				got := ""
				if err == nil {
					got = l.Proxy.Key().String()
				} else if !IsNoMatch(err) {
					t.Fatalf("step %d: unexpected error %v", i, err)
				}
				if got != st.want {
					t.Errorf("step %d: granted %q, want %q", i, got, st.want)
				}
			}
		})
	}
}

func TestNoMatchCountsAreAdditive(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	s.UpsertProxy(unhealthy(px("a", "sick", 0, "zone", "x")))
	s.UpsertProxy(px("a", "globalcool", 1, "zone", "x"))
	s.UpsertProxy(px("a", "cool", 2, "zone", "x"))
	s.UpsertProxy(px("a", "busy", 3, "zone", "x"))
	s.UpsertProxy(px("a", "other", 1, "zone", "y"))
	s.UpsertProxy(px("b", "elsewhere", 1, "zone", "x"))
	sel := map[string]string{"zone": "x"}
	g := mustAcquire(t, s, AcquireRequest{Namespace: "a", Selector: sel})
	if g.Proxy.Name != "globalcool" {
		t.Fatalf("first lease on %s, want globalcool", g.Proxy.Name)
	}
	s.Release(g.ID)
	coolEverywhere(s, g.Proxy.Key())
	l := mustAcquire(t, s, AcquireRequest{Namespace: "a", Selector: sel, Target: "t"})
	if l.Proxy.Name != "cool" {
		t.Fatalf("second lease on %s, want cool", l.Proxy.Name)
	}
	if err := s.Report(l.ID, ResultRateLimited, ""); err != nil { // falls back to target t
		t.Fatal(err)
	}
	s.Release(l.ID)
	if b := mustAcquire(t, s, AcquireRequest{Namespace: "a", Selector: sel, Target: "t"}); b.Proxy.Name != "busy" {
		t.Fatalf("third lease on %s, want busy", b.Proxy.Name)
	}

	_, err := s.Acquire(AcquireRequest{Namespace: "a", Selector: map[string]string{"zone": "x"}, Target: "t"})
	var nm *NoMatchError
	if !errors.As(err, &nm) {
		t.Fatalf("Acquire error %v, want *NoMatchError", err)
	}
	want := &NoMatchError{Considered: 4, AtCapacity: 1, InCooldown: 2, Unhealthy: 1}
	if diff := cmp.Diff(want, nm); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if !errors.Is(err, ErrNoMatch) {
		t.Errorf("errors.Is(err, ErrNoMatch) = false")
	}
	if diff := cmp.Diff(want, s.Diagnose(AcquireRequest{Namespace: "a", Selector: map[string]string{"zone": "x"}, Target: "t"})); diff != "" {
		t.Errorf("Diagnose (-want +got):\n%s", diff)
	}
	// Without a target only the global cooldown applies: "cool" is free for it.
	l2 := mustAcquire(t, s, AcquireRequest{Namespace: "a", Selector: map[string]string{"zone": "x"}})
	if l2.Proxy.Name != "cool" {
		t.Errorf("targetless lease on %s, want cool", l2.Proxy.Name)
	}
	// TryAcquire: the cheap sentinel, no counts.
	_, err = s.TryAcquire(AcquireRequest{Namespace: "a", Selector: map[string]string{"zone": "x"}})
	if err != ErrNoMatch {
		t.Errorf("TryAcquire error %v, want ErrNoMatch itself", err)
	}
	// A selector pair nobody has: everything zero.
	_, err = s.Acquire(AcquireRequest{Selector: map[string]string{"zone": "mars"}})
	if !errors.As(err, &nm) || *nm != (NoMatchError{}) {
		t.Errorf("unknown selector: %v, want zero counts", err)
	}
}

func TestCooldownTargetFallback(t *testing.T) {
	tests := []struct {
		name         string
		leaseTarget  string
		reportTarget string
		result       string
		blockedFor   []string // targets that must not get the proxy during the window
		allowedFor   []string // targets that still get it
	}{
		{name: "report target wins", leaseTarget: "a.com", reportTarget: "b.com", result: ResultRateLimited,
			blockedFor: []string{"b.com"}, allowedFor: []string{"a.com", "c.com", ""}},
		{name: "falls back to the lease target", leaseTarget: "a.com", result: ResultRateLimited,
			blockedFor: []string{"a.com"}, allowedFor: []string{"b.com", ""}},
		{name: "banned shares the window", leaseTarget: "a.com", result: ResultBanned,
			blockedFor: []string{"a.com"}, allowedFor: []string{"b.com"}},
		{name: "ok starts nothing", leaseTarget: "a.com", result: ResultOK,
			allowedFor: []string{"a.com", "b.com", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fc := newTestStore(t, Options{CooldownWindow: time.Minute})
			s.UpsertProxy(px("ns", "p", 1))
			l := mustAcquire(t, s, AcquireRequest{Target: tc.leaseTarget})
			if err := s.Report(l.ID, tc.result, tc.reportTarget); err != nil {
				t.Fatal(err)
			}
			s.Release(l.ID)
			check := func(when string, blocked, allowed []string) {
				for _, target := range blocked {
					if l, err := s.Acquire(AcquireRequest{Target: target}); err == nil {
						t.Errorf("%s: target %q got %s during its cooldown", when, target, l.Proxy.Name)
						s.Release(l.ID)
					}
				}
				for _, target := range allowed {
					l, err := s.Acquire(AcquireRequest{Target: target})
					if err != nil {
						t.Errorf("%s: target %q: %v", when, target, err)
						continue
					}
					s.Release(l.ID)
				}
			}
			check("during window", tc.blockedFor, tc.allowedFor)
			fc.Step(time.Minute - time.Nanosecond)
			check("just before the end", tc.blockedFor, nil)
			fc.Step(time.Nanosecond)
			check("after the window", nil, append(tc.blockedFor, tc.allowedFor...))
		})
	}
}

func TestCooldownExtendsNeverShortens(t *testing.T) {
	s, fc := newTestStore(t, Options{CooldownWindow: 10 * time.Minute, MaxLeasesPerProxy: 2})
	s.UpsertProxy(px("ns", "p", 1))
	a := mustAcquire(t, s, AcquireRequest{Target: "x"})
	b := mustAcquire(t, s, AcquireRequest{Target: "y"})
	if err := s.Report(a.ID, ResultRateLimited, "x"); err != nil {
		t.Fatal(err)
	}
	fc.Step(5 * time.Minute)
	if err := s.Report(b.ID, ResultRateLimited, "x"); err != nil { // extends to t0+15m
		t.Fatal(err)
	}
	s.Release(a.ID)
	s.Release(b.ID)
	fc.Step(6 * time.Minute) // t0+11m: the first window is over, the second is not
	if _, err := s.Acquire(AcquireRequest{Target: "x"}); !IsNoMatch(err) {
		t.Fatalf("acquire at t0+11m: %v, want no match (extended cooldown)", err)
	}
	if got, want := s.NextChange(), t0.Add(15*time.Minute); !got.Equal(want) {
		t.Errorf("NextChange = %v, want %v (superseded cooldown ignored)", got, want)
	}
	fc.Step(4 * time.Minute)
	if _, err := s.Acquire(AcquireRequest{Target: "x"}); err != nil {
		t.Fatalf("acquire at t0+15m: %v", err)
	}
}

func TestReportWindowAfterLeaseEnds(t *testing.T) {
	tests := []struct {
		name string
		end  func(s *Store, id string)
		// endedAfter is how long after acquisition the lease ended.
		endedAfter time.Duration
	}{
		{name: "expired", end: func(*Store, string) {}, endedAfter: time.Minute},
		{name: "released", end: func(s *Store, id string) { s.Release(id) }, endedAfter: 30 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fc := newTestStore(t, Options{CooldownWindow: 2 * time.Minute})
			s.UpsertProxy(px("ns", "p", 1))
			l := mustAcquire(t, s, AcquireRequest{Target: "site", TTL: time.Minute})
			fc.Step(tc.endedAfter)
			tc.end(s, l.ID)
			fc.Step(time.Minute - tc.endedAfter) // now t0+1m: the lease has ended either way
			if _, ok := s.Get(l.ID); ok {
				t.Fatalf("Get found an ended lease")
			}
			if err := s.Report(l.ID, ResultOK, ""); err != nil {
				t.Fatalf("report right after the end: %v", err)
			}
			end := t0.Add(tc.endedAfter).Add(2 * time.Minute)
			fc.SetTime(end.Add(-time.Nanosecond))
			if err := s.Report(l.ID, ResultRateLimited, ""); err != nil {
				t.Fatalf("report at the last instant of the window: %v", err)
			}
			// The late report cooled (proxy, lease target).
			if _, err := s.Acquire(AcquireRequest{Target: "site"}); !IsNoMatch(err) {
				t.Errorf("acquire for the reported target: %v, want no match", err)
			}
			if _, err := s.Renew(l.ID, 0); !IsLeaseEnded(err) {
				t.Errorf("Renew of an ended lease: %v, want ErrLeaseEnded", err)
			}
			fc.SetTime(end)
			if err := s.Report(l.ID, ResultOK, ""); !IsUnknownLease(err) {
				t.Errorf("report after the window: %v, want ErrUnknownLease", err)
			}
			if _, err := s.Renew(l.ID, 0); !IsUnknownLease(err) {
				t.Errorf("Renew after the window: %v, want ErrUnknownLease", err)
			}
		})
	}
}

func TestReportErrors(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	s.UpsertProxy(px("ns", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{})
	tests := []struct {
		id, result string
		check      func(error) bool
	}{
		{l.ID, "sad", IsInvalidResult},
		{l.ID, "", IsInvalidResult},
		{"nope", "sad", IsInvalidResult}, // result is checked first
		{"nope", ResultOK, IsUnknownLease},
		{l.ID, ResultOK, func(err error) bool { return err == nil }},
	}
	for _, tc := range tests {
		if err := s.Report(tc.id, tc.result, ""); !tc.check(err) {
			t.Errorf("Report(%q, %q) = %v", tc.id, tc.result, err)
		}
	}
	got, _ := s.Get(l.ID)
	if got.LastResult != ResultOK {
		t.Errorf("LastResult = %q, want ok", got.LastResult)
	}
}

func TestRenew(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxTTL: 10 * time.Minute, DefaultTTL: time.Minute})
	s.UpsertProxy(px("ns", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{TTL: 2 * time.Minute})
	fc.Step(90 * time.Second)

	if _, err := s.Renew(l.ID, 11*time.Minute); !IsTTLTooLong(err) {
		t.Fatalf("Renew over max: %v, want *TTLError", err)
	} else {
		var te *TTLError
		errors.As(err, &te)
		if te.Max != 10*time.Minute || te.Requested != 11*time.Minute {
			t.Errorf("TTLError = %+v", te)
		}
	}
	if _, err := s.Renew(l.ID, -time.Second); !IsNegativeTTL(err) {
		t.Errorf("Renew negative: %v", err)
	}
	r, err := s.Renew(l.ID, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := fc.Now().Add(10 * time.Minute); !r.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v (exactly MaxTTL from now)", r.ExpiresAt, want)
	}
	r2, err := s.Renew(l.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r2.TTL != 10*time.Minute || r2.Revision <= r.Revision {
		t.Errorf("Renew(0): TTL %v revision %d→%d, want the current TTL and a newer revision", r2.TTL, r.Revision, r2.Revision)
	}
	if _, err := s.Renew("nope", 0); !IsUnknownLease(err) {
		t.Errorf("Renew unknown: %v", err)
	}
	fc.Step(10*time.Minute - time.Nanosecond)
	if _, ok := s.Get(l.ID); !ok {
		t.Errorf("lease gone before its renewed expiry")
	}
	fc.Step(time.Nanosecond)
	if _, ok := s.Get(l.ID); ok {
		t.Errorf("lease alive at its renewed expiry")
	}
}

func TestAcquireTTL(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxTTL: time.Hour, DefaultTTL: 5 * time.Minute})
	s.UpsertProxy(px("ns", "p", 1))
	if _, err := s.Acquire(AcquireRequest{TTL: time.Hour + 1}); !IsTTLTooLong(err) {
		t.Errorf("over max: %v", err)
	}
	if _, err := s.Acquire(AcquireRequest{TTL: -1}); !IsNegativeTTL(err) {
		t.Errorf("negative: %v", err)
	}
	l := mustAcquire(t, s, AcquireRequest{})
	if l.TTL != 5*time.Minute || !l.ExpiresAt.Equal(fc.Now().Add(5*time.Minute)) || !l.AcquiredAt.Equal(fc.Now()) {
		t.Errorf("default TTL lease = %+v", l)
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	s, fc := newTestStore(t, Options{})
	s.UpsertProxy(px("ns", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{TTL: time.Minute})
	if !s.Release(l.ID) {
		t.Fatal("first release: false")
	}
	if s.Release(l.ID) {
		t.Error("second release: true")
	}
	if s.Release("never-existed") {
		t.Error("release of an unknown ID: true")
	}
	l2 := mustAcquire(t, s, AcquireRequest{TTL: time.Minute})
	fc.Step(time.Minute)
	if s.Release(l2.ID) {
		t.Error("release of an expired lease: true")
	}
	if s.Active() != 0 {
		t.Errorf("Active = %d", s.Active())
	}
	mustAcquire(t, s, AcquireRequest{}) // capacity came back
}

func TestHeldByAndCounts(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxLeasesPerProxy: 3})
	s.UpsertProxy(px("ns", "p", 1))
	s.UpsertProxy(px("ns", "q", 2))
	a := mustAcquire(t, s, AcquireRequest{Flow: "x", TTL: time.Minute})
	mustAcquire(t, s, AcquireRequest{Flow: "x", TTL: 2 * time.Minute})
	mustAcquire(t, s, AcquireRequest{Flow: "y", TTL: 2 * time.Minute})
	if got := []int{s.HeldBy("x"), s.HeldBy("y"), s.HeldBy("z")}; !slices.Equal(got, []int{2, 1, 0}) {
		t.Errorf("HeldBy x,y,z = %v", got)
	}
	want := map[ProxyKey]int{{Namespace: "ns", Name: "p"}: 2, {Namespace: "ns", Name: "q"}: 1}
	if diff := cmp.Diff(want, s.Counts()); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
	if a.Proxy.Name != "p" {
		t.Fatalf("first lease on %s", a.Proxy.Name)
	}
	fc.Step(time.Minute) // a expires
	if got := s.HeldBy("x"); got != 1 {
		t.Errorf("HeldBy(x) after expiry = %d, want 1", got)
	}
	if s.Active() != 2 {
		t.Errorf("Active = %d, want 2", s.Active())
	}
}

func TestNamedLeases(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxLeasesPerProxy: 5})
	s.UpsertProxy(px("ns", "p", 1))
	s.UpsertProxy(px("other", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{Namespace: "ns", Name: "crawl-1"})
	if l.Name != "crawl-1" || l.Namespace != "ns" {
		t.Errorf("lease name %s/%s", l.Namespace, l.Name)
	}
	if _, err := s.Acquire(AcquireRequest{Namespace: "ns", Name: "crawl-1"}); !IsAlreadyExists(err) {
		t.Errorf("duplicate name: %v", err)
	}
	mustAcquire(t, s, AcquireRequest{Namespace: "other", Name: "crawl-1"}) // names are per namespace
	got, ok := s.GetByName("ns", "crawl-1")
	if !ok || got.ID != l.ID {
		t.Errorf("GetByName = %+v, %v", got, ok)
	}
	unnamed := mustAcquire(t, s, AcquireRequest{Namespace: "ns"})
	if unnamed.Name != unnamed.ID {
		t.Errorf("unnamed lease Name %q, want its ID %q", unnamed.Name, unnamed.ID)
	}
	s.Release(l.ID)
	if _, ok := s.GetByName("ns", "crawl-1"); ok {
		t.Error("name still taken after release")
	}
	mustAcquire(t, s, AcquireRequest{Namespace: "ns", Name: "crawl-1"})
	if got := len(s.List("ns")); got != 2 {
		t.Errorf("List(ns) has %d leases, want 2", got)
	}
	if got := len(s.List("")); got != 3 {
		t.Errorf("List() has %d leases, want 3", got)
	}
}

// A lease named by its ID has no entry in the names map (a map entry less
// per HTTP lease); it is found by name all the same, live and ended, in its
// namespace only, and its ID stays a name no other lease there may take.
func TestLeasesNamedByTheirID(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxLeasesPerProxy: 5})
	s.UpsertProxy(px("ns", "p", 1))
	s.UpsertProxy(px("other", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{Namespace: "ns"})
	if got, ok := s.GetByName("ns", l.ID); !ok || got.ID != l.ID {
		t.Errorf("GetByName(ns, its ID) = %+v, %v", got, ok)
	}
	if _, ok := s.GetByName("other", l.ID); ok {
		t.Error("found by its ID in another namespace")
	}
	if _, err := s.Acquire(AcquireRequest{Namespace: "ns", Name: l.ID}); !IsAlreadyExists(err) {
		t.Errorf("a lease named by another's ID in its namespace: %v", err)
	}
	mustAcquire(t, s, AcquireRequest{Namespace: "other", Name: l.ID})
	if id, live, ok := s.LookupName("ns", l.ID); !ok || !live || id != l.ID {
		t.Errorf("LookupName live = %q, %v, %v", id, live, ok)
	}
	s.Release(l.ID)
	if id, live, ok := s.LookupName("ns", l.ID); !ok || live || id != l.ID {
		t.Errorf("LookupName after release = %q, %v, %v; want the ended lease", id, live, ok)
	}
	if id, live, _ := s.LookupName("other", l.ID); !live || id == l.ID {
		t.Errorf("LookupName in the other namespace = %q, %v; want the live lease named so there", id, live)
	}
	// A named lease takes the name now; its end is then the newest.
	named := mustAcquire(t, s, AcquireRequest{Namespace: "ns", Name: l.ID})
	s.Release(named.ID)
	if id, _, ok := s.LookupName("ns", l.ID); !ok || id != named.ID {
		t.Errorf("LookupName after the named lease ended = %q, %v; want %s", id, ok, named.ID)
	}
	if bad := checkInvariants(s); len(bad) > 0 {
		t.Errorf("invariants: %q", bad)
	}
}

func TestFleetChanges(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	s.UpsertProxy(px("ns", "p", 10, "zone", "x"))
	s.UpsertProxy(px("ns", "q", 20, "zone", "x"))

	// Latency change reorders.
	s.UpsertProxy(px("ns", "q", 5, "zone", "x"))
	l := mustAcquire(t, s, AcquireRequest{})
	if l.Proxy.Name != "q" {
		t.Errorf("after latency change got %s, want q", l.Proxy.Name)
	}
	// Attribute change re-indexes.
	s.UpsertProxy(px("ns", "p", 10, "zone", "y"))
	if _, err := s.Acquire(AcquireRequest{Selector: map[string]string{"zone": "x"}}); !IsNoMatch(err) {
		t.Errorf("old attribute still matches: %v", err)
	}
	lp := mustAcquire(t, s, AcquireRequest{Selector: map[string]string{"zone": "y"}})
	// A proxy that turns unhealthy keeps its leases but is not offered.
	s.Release(lp.ID)
	s.UpsertProxy(unhealthy(px("ns", "p", 10, "zone", "y")))
	if _, err := s.Acquire(AcquireRequest{}); !IsNoMatch(err) {
		t.Errorf("unhealthy proxy offered: %v", err)
	}
	// A removed proxy with a live lease: the lease ends (its renewal says
	// why), the count goes, and a proxy re-added under the same name is free.
	s.RemoveProxy(ProxyKey{Namespace: "ns", Name: "q"})
	if _, ok := s.Get(l.ID); ok {
		t.Error("lease on a removed proxy still live")
	}
	if _, err := s.Renew(l.ID, 0); !IsLeaseEnded(err) || EndReason(err) != ProxyDeleted {
		t.Errorf("renew of a lease whose proxy was removed = %v, want lease ended, reason ProxyDeleted", err)
	}
	if got := s.Counts()[ProxyKey{Namespace: "ns", Name: "q"}]; got != 0 {
		t.Errorf("count on removed proxy = %d", got)
	}
	list, _ := s.ListProxies(context.Background(), "")
	if len(list) != 1 || list[0].Name != "p" {
		t.Errorf("ListProxies = %+v, want only p", list)
	}
	s.UpsertProxy(px("ns", "q", 5, "zone", "x"))
	if l2 := mustAcquire(t, s, AcquireRequest{}); l2.Proxy.Name != "q" {
		t.Errorf("got %s, want q", l2.Proxy.Name)
	}
	// Removing an unknown proxy is a no-op.
	s.RemoveProxy(ProxyKey{Namespace: "ns", Name: "ghost"})
}

func TestNextChange(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxLeasesPerProxy: 3, CooldownWindow: 3 * time.Minute})
	if got := s.NextChange(); !got.IsZero() {
		t.Errorf("empty store NextChange = %v, want zero", got)
	}
	s.UpsertProxy(px("ns", "p", 1))
	a := mustAcquire(t, s, AcquireRequest{TTL: 5 * time.Minute})
	mustAcquire(t, s, AcquireRequest{TTL: 4 * time.Minute})
	if got, want := s.NextChange(), t0.Add(4*time.Minute); !got.Equal(want) {
		t.Errorf("NextChange = %v, want %v", got, want)
	}
	if err := s.Report(a.ID, ResultRateLimited, "x"); err != nil {
		t.Fatal(err)
	}
	if got, want := s.NextChange(), t0.Add(3*time.Minute); !got.Equal(want) {
		t.Errorf("with cooldown NextChange = %v, want %v", got, want)
	}
	fc.Step(3 * time.Minute)
	if got, want := s.NextChange(), t0.Add(4*time.Minute); !got.Equal(want) {
		t.Errorf("after cooldown NextChange = %v, want %v", got, want)
	}
	fc.Step(2 * time.Minute)
	if got := s.NextChange(); !got.IsZero() {
		t.Errorf("all ended NextChange = %v, want zero", got)
	}
}

func TestOnCapacity(t *testing.T) {
	s, fc := newTestStore(t, Options{CooldownWindow: time.Minute})
	calls := 0
	cancel := s.OnCapacity(func() { calls++ })
	expect := func(what string, want int) {
		t.Helper()
		if calls != want {
			t.Errorf("%s: %d hook calls, want %d", what, calls, want)
		}
		calls = 0
	}
	s.UpsertProxy(unhealthy(px("ns", "p", 1)))
	expect("unhealthy proxy added", 0)
	s.UpsertProxy(px("ns", "p", 1))
	expect("proxy turned healthy", 1)
	s.UpsertProxy(px("ns", "p", 1))
	expect("no-op upsert", 0)
	s.UpsertProxy(px("ns", "p", 7))
	expect("latency change", 0)
	s.UpsertProxy(px("ns", "p", 7, "zone", "x"))
	expect("attribute change", 1)
	s.UpsertProxy(px("ns", "q", 7))
	expect("healthy proxy added", 1)
	l := mustAcquire(t, s, AcquireRequest{TTL: time.Minute})
	expect("acquire", 0)
	coolEverywhere(s, l.Proxy.Key())
	expect("cooling everywhere", 0)
	s.Release(l.ID)
	expect("release of a globally cooling proxy", 0)
	fc.Step(time.Minute)
	s.Sweep()
	expect("cooldown end", 1)
	l = mustAcquire(t, s, AcquireRequest{TTL: time.Minute})
	s.Release(l.ID)
	expect("release", 1)
	s.Release(l.ID)
	expect("second release", 0)
	mustAcquire(t, s, AcquireRequest{TTL: time.Minute})
	fc.Step(time.Minute)
	_ = s.Active() // any call applies the expiry
	expect("expiry", 1)
	cancel()
	mustAcquire(t, s, AcquireRequest{TTL: time.Minute})
	fc.Step(time.Minute)
	s.Sweep()
	expect("after cancel", 0)
}

// Hooks and subscribers run without the store lock: a hook that calls the
// store must not deadlock.
func TestHooksRunOutsideTheLock(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	s.UpsertProxy(px("ns", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{})
	seen := -1
	s.OnCapacity(func() { seen = s.Active() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Release(l.ID)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Release deadlocked: hook called under the store lock")
	}
	if seen != 0 {
		t.Errorf("hook saw Active = %d, want 0 (called after the change)", seen)
	}
}

func TestSubscribe(t *testing.T) {
	s, fc := newTestStore(t, Options{})
	s.UpsertProxy(px("ns", "p", 1))
	s.UpsertProxy(px("ns", "q", 2))
	var got []Event
	cancel := s.Subscribe(func(e Event) { got = append(got, e) })

	a := mustAcquire(t, s, AcquireRequest{TTL: time.Minute, Holder: "h"})
	b := mustAcquire(t, s, AcquireRequest{TTL: 2 * time.Minute})
	if _, err := s.Renew(b.ID, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Report(b.ID, ResultOK, ""); err != nil {
		t.Fatal(err)
	}
	fc.Step(time.Minute)
	s.Sweep() // a expires
	s.Release(b.ID)
	s.Release(b.ID) // no event for a no-op

	type ev struct {
		Type   EventType
		Reason Reason
		ID     string
		Rev    uint64
	}
	var gotEv []ev
	for _, e := range got {
		if e.Revision != e.Lease.Revision {
			t.Errorf("event revision %d != lease revision %d", e.Revision, e.Lease.Revision)
		}
		gotEv = append(gotEv, ev{e.Type, e.Reason, e.Lease.ID, e.Revision})
	}
	want := []ev{
		{Added, Acquired, a.ID, 1},
		{Added, Acquired, b.ID, 2},
		{Modified, Renewed, b.ID, 3},
		{Modified, Reported, b.ID, 4},
		{Deleted, Expired, a.ID, 5},
		{Deleted, Released, b.ID, 6},
	}
	if diff := cmp.Diff(want, gotEv); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got[0].Lease.Holder != "h" || got[4].Lease.ExpiresAt != t0.Add(time.Minute) {
		t.Errorf("event payloads: %+v / %+v", got[0].Lease, got[4].Lease)
	}
	_, rev := s.Snapshot("")
	if rev != 6 {
		t.Errorf("Snapshot revision = %d, want 6", rev)
	}
	cancel()
	mustAcquire(t, s, AcquireRequest{})
	if len(got) != 6 {
		t.Errorf("event delivered after cancel")
	}
}

func TestSweepRunnable(t *testing.T) {
	s, fc := newTestStore(t, Options{SweepInterval: time.Second})
	if s.NeedLeaderElection() {
		t.Error("sweep must not be leader-elected")
	}
	s.UpsertProxy(px("ns", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{TTL: time.Second})
	events := make(chan Event, 4)
	s.Subscribe(func(e Event) { events <- e })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	for !fc.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	fc.Step(time.Second) // the ticker fires; nobody else calls the store
	select {
	case e := <-events:
		if e.Type != Deleted || e.Reason != Expired || e.Lease.ID != l.ID {
			t.Errorf("sweep event = %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no expiry event from the sweep")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start returned %v", err)
	}
}

func TestExpiryIsCheckedOnEveryRead(t *testing.T) {
	// No sweep runs here: reads alone must see the expiry.
	s, fc := newTestStore(t, Options{})
	s.UpsertProxy(px("ns", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{TTL: time.Minute, Flow: "f"})
	fc.Step(time.Minute)
	if _, ok := s.Get(l.ID); ok {
		t.Error("Get returned an expired lease")
	}
	if n := len(s.List("")); n != 0 {
		t.Errorf("List has %d leases", n)
	}
	if len(s.Counts()) != 0 || s.HeldBy("f") != 0 || s.Active() != 0 {
		t.Errorf("counts after expiry: %v %d %d", s.Counts(), s.HeldBy("f"), s.Active())
	}
	mustAcquire(t, s, AcquireRequest{})
}

func TestOptions(t *testing.T) {
	if _, err := New(Options{DefaultTTL: 2 * time.Hour, MaxTTL: time.Hour}, nil); err == nil {
		t.Error("DefaultTTL > MaxTTL accepted")
	}
	if _, err := New(Options{MaxLeasesPerProxy: -1}, nil); err == nil {
		t.Error("negative MaxLeasesPerProxy accepted")
	}
	s, err := New(Options{MaxTTL: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := s.Options()
	if o.DefaultTTL != time.Minute || o.MaxLeasesPerProxy != 1 || o.CooldownWindow != DefaultCooldownWindow {
		t.Errorf("defaults = %+v", o)
	}
	id := o.NewID()
	if len(id) != 32 || id == o.NewID() {
		t.Errorf("random IDs %q", id)
	}
}

func TestDuplicateIDsAreRejected(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxLeasesPerProxy: 2, NewID: func() string { return "same" }})
	s.UpsertProxy(px("ns", "p", 1))
	mustAcquire(t, s, AcquireRequest{})
	if _, err := s.Acquire(AcquireRequest{}); err == nil {
		t.Fatal("second lease with a duplicate ID granted")
	}
	if got := s.Counts()[ProxyKey{Namespace: "ns", Name: "p"}]; got != 1 {
		t.Errorf("count = %d after a refused grant", got)
	}
}

// Only the holder changes a lease: another holder's release, renewal and
// report leave it exactly as it was, live or ended; AnyHolder and the holder
// itself may.
func TestOnlyTheHolderChangesALease(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxTTL: time.Hour, CooldownWindow: time.Minute})
	s.UpsertProxy(px("ns", "p1", 10))
	l := mustAcquire(t, s, AcquireRequest{Namespace: "ns", Holder: "http:alice", Flow: "http:alice", TTL: 10 * time.Minute, Target: "example.com"})

	if ok, err := s.ReleaseAs("http:mallory", l.ID); ok || !IsNotHolder(err) {
		t.Errorf("ReleaseAs(other) = %v, %v; want false and a NotHolderError", ok, err)
	}
	if _, err := s.RenewAs("http:mallory", l.ID, time.Hour); !IsNotHolder(err) {
		t.Errorf("RenewAs(other) = %v, want a NotHolderError", err)
	}
	if err := s.ReportAs("http:mallory", l.ID, ResultBanned, ""); !IsNotHolder(err) {
		t.Errorf("ReportAs(other) = %v, want a NotHolderError", err)
	}
	got, ok := s.Get(l.ID)
	if !ok || !got.ExpiresAt.Equal(l.ExpiresAt) || got.LastResult != "" {
		t.Fatalf("after another holder's calls the lease is %+v (live %v); want it untouched", got, ok)
	}
	// The ban was not recorded: the proxy is still leasable for the target.
	if _, err := s.Acquire(AcquireRequest{Namespace: "ns", Holder: "http:bob", Target: "example.com"}); !IsNoMatch(err) {
		t.Fatalf("second lease on an exclusive proxy: %v, want no match (it is leased, not cooling down)", err)
	}
	if err := s.Diagnose(AcquireRequest{Namespace: "ns", Target: "example.com"}); err.InCooldown != 0 {
		t.Errorf("the non-holder's ban put the proxy in cooldown: %+v", err)
	}

	// The holder may, and its release ends the lease; the ended lease
	// still refuses another holder's report.
	if _, err := s.RenewAs("http:alice", l.ID, 20*time.Minute); err != nil {
		t.Errorf("RenewAs(holder) = %v", err)
	}
	if ok, err := s.ReleaseAs("http:alice", l.ID); !ok || err != nil {
		t.Fatalf("ReleaseAs(holder) = %v, %v; want true, nil", ok, err)
	}
	fc.Step(time.Second)
	if err := s.ReportAs("http:mallory", l.ID, ResultBanned, ""); !IsNotHolder(err) {
		t.Errorf("ReportAs(other) on an ended lease = %v, want a NotHolderError", err)
	}
	if _, err := s.RenewAs("http:mallory", l.ID, time.Minute); !IsNotHolder(err) {
		t.Errorf("RenewAs(other) on an ended lease = %v, want a NotHolderError (not a hint that it existed)", err)
	}
	if err := s.ReportAs("http:alice", l.ID, ResultBanned, ""); err != nil {
		t.Errorf("ReportAs(holder) on an ended lease = %v", err)
	}
	// AnyHolder (the Kubernetes API, where RBAC decides) may change any lease.
	l2 := mustAcquire(t, s, AcquireRequest{Namespace: "ns", Holder: "http:bob", Target: "other.example"})
	if ok, err := s.ReleaseAs(AnyHolder, l2.ID); !ok || err != nil {
		t.Errorf("ReleaseAs(AnyHolder) = %v, %v; want true, nil", ok, err)
	}
}

// Both lease APIs show a TTL through Lease.TTLSeconds: rounded up, so a
// lease never looks shorter than it is (the HTTP API used to truncate).
func TestTTLSeconds(t *testing.T) {
	for _, tt := range []struct {
		ttl  time.Duration
		want int32
	}{
		{0, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2},
		{5 * time.Minute, 300}, {1 << 62, 1<<31 - 1},
	} {
		if got := (&Lease{TTL: tt.ttl}).TTLSeconds(); got != tt.want {
			t.Errorf("TTLSeconds(%s) = %d, want %d", tt.ttl, got, tt.want)
		}
	}
}

// A lease follows its proxy: a new address (the instance was replaced) and
// a health change show on the live lease as a Modified event with reason
// ProxyChanged; a latency change does not (it would flood watchers); a
// deleted Proxy ends the lease with reason ProxyDeleted.
func TestLeaseFollowsItsProxy(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxTTL: time.Hour, CooldownWindow: time.Minute})
	p := px("ns", "p", 10)
	s.UpsertProxy(p)
	l := mustAcquire(t, s, AcquireRequest{Namespace: "ns", Holder: "h"})
	var events []Event
	cancel := s.Subscribe(func(ev Event) { events = append(events, ev) })
	defer cancel()

	moved := p
	moved.URL, moved.Host = "http://127.0.0.5:3128", "127.0.0.5"
	s.UpsertProxy(moved)
	slow := moved
	slow.LatencyMillis = 99
	s.UpsertProxy(slow)
	sick := slow
	sick.Healthy = false
	s.UpsertProxy(sick)

	got, ok := s.Get(l.ID)
	if !ok || got.Proxy.URL != moved.URL || got.Proxy.Host != moved.Host || got.Proxy.Healthy {
		t.Fatalf("lease after its proxy moved and turned unhealthy: %+v (live %v)", got.Proxy, ok)
	}
	type ev struct {
		Type   EventType
		Reason Reason
		URL    string
		Health bool
	}
	var seen []ev
	for _, e := range events {
		seen = append(seen, ev{e.Type, e.Reason, e.Lease.Proxy.URL, e.Lease.Proxy.Healthy})
	}
	want := []ev{
		{Modified, ProxyChanged, moved.URL, true},
		{Modified, ProxyChanged, moved.URL, false},
	}
	if d := cmp.Diff(want, seen); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}

	events = nil
	s.RemoveProxy(p.Key())
	if len(events) != 1 || events[0].Type != Deleted || events[0].Reason != ProxyDeleted {
		t.Errorf("events when the Proxy is deleted = %+v, want one Deleted/ProxyDeleted", events)
	}
	if _, err := s.RenewAs("h", l.ID, 0); EndReason(err) != ProxyDeleted {
		t.Errorf("renew after the Proxy was deleted = %v, want ended with reason ProxyDeleted", err)
	}
}
