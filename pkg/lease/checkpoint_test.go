package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fleetWithHistory builds a store with live leases (named, with metadata),
// a cooldown from a report, an ended lease and a lease on an unhealthy proxy.
func fleetWithHistory(t *testing.T) (*Store, []*Lease) {
	t.Helper()
	s, _ := newTestStore(t, Options{MaxLeasesPerProxy: 1, CooldownWindow: time.Minute, MaxTTL: time.Hour})
	for _, p := range []ProxyInfo{px("a", "p1", 1, "tier", "gold"), px("a", "p2", 2, "tier", "gold"), px("a", "p3", 3), px("b", "p4", 4)} {
		s.UpsertProxy(p)
	}
	l1 := mustAcquire(t, s, AcquireRequest{Selector: map[string]string{"tier": "gold"}, Target: "site", TTL: 10 * time.Minute,
		Holder: "http:crawler-a", Flow: "http:crawler-a", Name: "first", Meta: Metadata{Labels: map[string]string{"app": "x"}}})
	l2 := mustAcquire(t, s, AcquireRequest{Namespace: "b", Target: "other", TTL: 20 * time.Minute, Holder: "u", Flow: "u"})
	l3 := mustAcquire(t, s, AcquireRequest{Namespace: "a", Target: "site", TTL: 30 * time.Minute, Holder: "u", Flow: "u"})
	if err := s.Report(l3.ID, ResultBanned, "site"); err != nil {
		t.Fatal(err)
	}
	if !s.Release(l3.ID) {
		t.Fatal("release")
	}
	return s, []*Lease{l1, l2, l3}
}

func TestStateRestoreRoundTrip(t *testing.T) {
	a, live := fleetWithHistory(t)
	st, changes := a.State()
	if len(st.Leases) != 2 || len(st.Cooldowns) != 1 || len(st.Ended) != 1 || st.Revision == 0 || changes <= st.Revision {
		t.Fatalf("state: %d leases, %d cooldowns, %d ended, revision %d, changes %d", len(st.Leases), len(st.Cooldowns), len(st.Ended), st.Revision, changes)
	}
	b, _ := newTestStore(t, Options{MaxLeasesPerProxy: 1, CooldownWindow: time.Minute, MaxTTL: time.Hour})
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	if bad := checkInvariants(b); len(bad) > 0 {
		t.Fatalf("invariants after Restore: %q", bad)
	}
	got, _ := b.State()
	if d := cmp.Diff(st, got); d != "" {
		t.Errorf("restored state (-want +got):\n%s", d)
	}
	if b.Revision() != a.Revision() {
		t.Errorf("revision %d, want %d", b.Revision(), a.Revision())
	}
	// Nothing is offered until the informer brings the proxies back.
	if _, err := b.Acquire(AcquireRequest{}); !IsNoMatch(err) && !errors.Is(err, ErrExhausted) {
		t.Fatalf("acquire before the proxies are back: %v", err)
	}
	for _, p := range []ProxyInfo{px("a", "p1", 1, "tier", "gold"), px("a", "p2", 2, "tier", "gold"), px("a", "p3", 3), px("b", "p4", 4)} {
		b.UpsertProxy(p)
	}
	if bad := checkInvariants(b); len(bad) > 0 {
		t.Fatalf("invariants after the proxies came back: %q", bad)
	}
	// The leased proxies stay taken (capacity 1), the banned pair cools:
	// of namespace a's three proxies only the third is free for "site".
	l := mustAcquire(t, b, AcquireRequest{Namespace: "a", Target: "site"})
	if l.Proxy.Name == live[0].Proxy.Name || l.Proxy.Name == live[2].Proxy.Name {
		t.Errorf("granted %s: the restored lease's proxy is %s, the banned one %s", l.Proxy.Name, live[0].Proxy.Name, live[2].Proxy.Name)
	}
	if _, err := b.Acquire(AcquireRequest{Namespace: "b"}); !IsNoMatch(err) {
		t.Errorf("b/p4 is leased: %v", err)
	}
	// The holder renews and releases its restored lease; names still resolve.
	if _, err := b.RenewAs("http:crawler-a", live[0].ID, time.Minute); err != nil {
		t.Errorf("renew of a restored lease: %v", err)
	}
	if got, ok := b.GetByName("a", "first"); !ok || got.ID != live[0].ID || got.Meta.Labels["app"] != "x" {
		t.Errorf("GetByName after restore: %+v %v", got, ok)
	}
	if _, err := b.RenewAs("someone-else", live[1].ID, time.Minute); err == nil {
		t.Error("another holder renewed a restored lease")
	}
	// A late report on the restored ended lease still starts a cooldown.
	if err := b.Report(st.Ended[0].ID, ResultRateLimited, "late"); err != nil {
		t.Errorf("report on a restored ended lease: %v", err)
	}
	if bad := checkInvariants(b); len(bad) > 0 {
		t.Fatalf("invariants at the end: %q", bad)
	}
}

func TestRestoreAppliesWhatHappenedWhileDown(t *testing.T) {
	a, live := fleetWithHistory(t)
	st, _ := a.State()
	b, fc := newTestStore(t, Options{MaxLeasesPerProxy: 1, CooldownWindow: time.Minute, MaxTTL: time.Hour})
	var events []Event
	b.Subscribe(func(ev Event) { events = append(events, ev) })
	// The first lease (10m) expired while down and is inside its report
	// window (1m); the second (20m) is live; the ban's cooldown and the
	// released lease's record (1m) are over.
	fc.Step(10*time.Minute + 30*time.Second)
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	if len(events) != 0 {
		t.Errorf("Restore emitted %d events", len(events))
	}
	if _, ok := b.Get(live[0].ID); ok {
		t.Error("a lease past its expiry was restored live")
	}
	if _, err := b.GetAs(AnyHolder, live[0].ID); !IsLeaseEnded(err) {
		t.Errorf("expired-while-down lease: %v, want ended", err)
	}
	if _, ok := b.Get(live[1].ID); !ok {
		t.Error("a live lease was not restored")
	}
	got, _ := b.State()
	if len(got.Cooldowns) != 0 {
		t.Errorf("cooldowns past their end restored: %+v", got.Cooldowns)
	}
	if bad := checkInvariants(b); len(bad) > 0 {
		t.Fatalf("invariants: %q", bad)
	}

	// p4 was deleted while down: the informer never brings it back.
	b.UpsertProxy(px("a", "p1", 1, "tier", "gold"))
	if n := b.EndLeasesOfAbsentProxies(); n != 1 {
		t.Errorf("ended %d leases of absent proxies, want 1 (on b/p4)", n)
	}
	if _, err := b.GetAs(AnyHolder, live[1].ID); !IsLeaseEnded(err) {
		t.Errorf("lease on the deleted proxy: %v, want ended", err)
	}
	if bad := checkInvariants(b); len(bad) > 0 {
		t.Fatalf("invariants: %q", bad)
	}
}

func TestRestoredLeaseFollowsAMovedProxy(t *testing.T) {
	a, live := fleetWithHistory(t)
	st, _ := a.State()
	b, _ := newTestStore(t, Options{MaxLeasesPerProxy: 1, CooldownWindow: time.Minute, MaxTTL: time.Hour})
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	moved := px("b", "p4", 4)
	moved.URL, moved.Host = "http://10.0.0.9:3128", "10.0.0.9"
	var events []Event
	b.Subscribe(func(ev Event) { events = append(events, ev) })
	b.UpsertProxy(moved)
	got, ok := b.Get(live[1].ID)
	if !ok || got.Proxy.URL != moved.URL {
		t.Errorf("restored lease shows %q, want the proxy's new address %q", got.Proxy.URL, moved.URL)
	}
	if len(events) != 1 || events[0].Type != Modified {
		t.Errorf("events %+v, want one Modified", events)
	}
	// Unchanged address: no event (negative control of the above).
	events = nil
	b.UpsertProxy(px("a", "p1", 1, "tier", "gold"))
	if len(events) != 0 {
		t.Errorf("an unmoved proxy's return emitted %+v", events)
	}
}

func TestRestoreRefusesANonEmptyStoreAndBadState(t *testing.T) {
	a, _ := fleetWithHistory(t)
	st, _ := a.State()
	if err := a.Restore(st); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("restore into a used store: %v", err)
	}
	b, _ := newTestStore(t, Options{})
	bad := st
	bad.Leases = append(bad.Leases, bad.Leases[0])
	if err := b.Restore(bad); err == nil {
		t.Error("a state listing a lease twice was restored")
	}
	if len(b.List("")) != 0 {
		t.Error("a refused restore left leases behind")
	}
}

// A standby's store already has the fleet from its informer when it takes
// over: Restore puts the leases onto those proxies (capacity counted, a
// moved proxy shown), with no placeholder left.
func TestRestoreOntoAFedStore(t *testing.T) {
	a, live := fleetWithHistory(t)
	st, _ := a.State()
	b, _ := newTestStore(t, Options{MaxLeasesPerProxy: 1, CooldownWindow: time.Minute, MaxTTL: time.Hour})
	moved := px("b", "p4", 4)
	moved.URL = "http://10.9.9.9:3128"
	for _, p := range []ProxyInfo{px("a", "p1", 1, "tier", "gold"), px("a", "p2", 2, "tier", "gold"), px("a", "p3", 3), moved} {
		b.UpsertProxy(p)
	}
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	if bad := checkInvariants(b); len(bad) > 0 {
		t.Fatalf("invariants: %q", bad)
	}
	if n := b.EndLeasesOfAbsentProxies(); n != 0 {
		t.Errorf("ended %d leases, but every proxy is there", n)
	}
	if got, _ := b.Get(live[1].ID); got.Proxy.URL != moved.URL || got.Revision <= st.Revision {
		t.Errorf("lease on the moved proxy shows %s (revision %d), want %s after %d", got.Proxy.URL, got.Revision, moved.URL, st.Revision)
	}
	if _, err := b.Acquire(AcquireRequest{Namespace: "b"}); !IsNoMatch(err) {
		t.Errorf("b/p4 holds a restored lease at capacity 1, yet: %v", err)
	}
	// Restoring twice is refused: the store has lease state now.
	if err := b.Restore(st); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("second restore: %v", err)
	}
}

// State keeps only the newest MaxEndedInState ended leases.
func TestStateBoundsTheEndedLeases(t *testing.T) {
	s, fc := newTestStore(t, Options{CooldownWindow: time.Hour})
	s.UpsertProxy(px("a", "p1", 1))
	var last string
	for range MaxEndedInState + 50 {
		l := mustAcquire(t, s, AcquireRequest{})
		s.Release(l.ID)
		last = l.ID
		fc.Step(time.Millisecond)
	}
	st, _ := s.State()
	if len(st.Ended) != MaxEndedInState {
		t.Fatalf("%d ended leases in the state, want %d", len(st.Ended), MaxEndedInState)
	}
	newest := false
	oldest := st.Ended[0].Until
	for _, e := range st.Ended {
		newest = newest || e.ID == last
		if e.Until.Before(oldest) {
			oldest = e.Until
		}
	}
	if !newest {
		t.Error("the newest ended lease is not in the state")
	}
	if want := t0.Add(50*time.Millisecond + time.Hour); oldest.Before(want) {
		t.Errorf("oldest ended lease kept until %s, want the 50 oldest dropped (from %s)", oldest, want)
	}
}

// After Freeze no lease changes, so a State taken then is final; time
// still ends leases.
func TestFreeze(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxLeasesPerProxy: 2})
	s.UpsertProxy(px("ns", "p1", 1))
	l := mustAcquire(t, s, AcquireRequest{Holder: "h", TTL: time.Minute})
	short := mustAcquire(t, s, AcquireRequest{Holder: "h", TTL: time.Second})
	s.Freeze()
	before, _ := s.State()
	for name, err := range map[string]error{
		"acquire":     func() error { _, err := s.Acquire(AcquireRequest{}); return err }(),
		"try acquire": func() error { _, err := s.TryAcquire(AcquireRequest{}); return err }(),
		"renew":       func() error { _, err := s.RenewAs("h", l.ID, time.Hour); return err }(),
		"report":      s.ReportAs("h", l.ID, ResultBanned, "t"),
		"release":     func() error { _, err := s.ReleaseAs("h", l.ID); return err }(),
		"readmit":     func() error { _, err := s.Readmit(Lease{ID: "x"}); return err }(),
	} {
		if !IsFrozen(err) {
			t.Errorf("%s after Freeze: %v, want ErrFrozen", name, err)
		}
	}
	after, _ := s.State()
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("state changed after Freeze (-before +after):\n%s", d)
	}
	fc.Step(2 * time.Second)
	if _, ok := s.Get(short.ID); ok {
		t.Error("a lease outlived its expiry in a frozen store")
	}
	if _, ok := s.Get(l.ID); !ok {
		t.Error("control: the longer lease is gone")
	}
}

// StateInto reuses the slices it is given and keeps nothing of what they
// held.
func TestStateIntoReuses(t *testing.T) {
	big, _ := fleetWithHistory(t)
	var st State
	big.StateInto(&st)
	if len(st.Leases) == 0 || len(st.Cooldowns) == 0 || len(st.Ended) == 0 {
		t.Fatalf("the fuller state is not full: %+v", st)
	}
	small, _ := newTestStore(t, Options{})
	small.UpsertProxy(px("ns", "p9", 1))
	mustAcquire(t, small, AcquireRequest{Holder: "h"})
	small.StateInto(&st)
	want, _ := small.State()
	if d := cmp.Diff(want, st, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("StateInto over a used State (-want +got):\n%s", d)
	}
}

// The ended leases come in the order they ended (oldest first, equal times
// in the order of their ending), the same each time and after a Restore, so
// that an unchanged store writes an unchanged checkpoint without sorting
// them.
func TestEndedOrderIsStableAcrossRestore(t *testing.T) {
	a, fc := newTestStore(t, Options{CooldownWindow: time.Hour})
	a.UpsertProxy(px("a", "p1", 1))
	var order []string
	for i := range 12 {
		l := mustAcquire(t, a, AcquireRequest{})
		a.Release(l.ID)
		order = append(order, l.ID)
		if i%4 == 3 { // four leases end at each instant
			fc.Step(time.Second)
		}
	}
	st, _ := a.State()
	var got []string
	for _, e := range st.Ended {
		got = append(got, e.ID)
	}
	if d := cmp.Diff(order, got); d != "" {
		t.Errorf("ended leases (-in the order they ended +in the state):\n%s", d)
	}
	again, _ := a.State()
	if d := cmp.Diff(st.Ended, again.Ended); d != "" {
		t.Errorf("a second state of the same store (-first +second):\n%s", d)
	}
	b, _ := newTestStore(t, Options{CooldownWindow: time.Hour})
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	restored, _ := b.State()
	if d := cmp.Diff(st.Ended, restored.Ended); d != "" {
		t.Errorf("after a restore (-before +after):\n%s", d)
	}
}
