package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// crashed is a store as a crash leaves it: a state taken at t0 (one lease,
// l1 on p1) restored 5s later into a store whose fleet p1–p3 (capacity 1,
// p3 deleted since) the informer has fed again. The leases a crash lost were
// granted in between.
func crashed(t *testing.T) (*Store, Lease) {
	t.Helper()
	a, fc := newTestStore(t, Options{MaxLeasesPerProxy: 1})
	a.UpsertProxy(px("ns", "p1", 1))
	kept := mustAcquire(t, a, AcquireRequest{Holder: "h", Flow: "h", TTL: time.Hour})
	st, _ := a.State()
	fc.Step(5 * time.Second)
	b, err := New(Options{MaxLeasesPerProxy: 1, NewID: seqIDs()}, fc)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []ProxyInfo{px("ns", "p1", 1), px("ns", "p2", 2)} {
		b.UpsertProxy(p)
	}
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	return b, *kept
}

// lost is a lease as its signed ID proves it, granted at t0+at.
func lost(id, proxy string, at, ttl time.Duration) Lease {
	return Lease{ID: id, Name: id, Namespace: "ns", Proxy: ProxyInfo{Namespace: "ns", Name: proxy}, Holder: "h", Flow: "h/f",
		Target: "site", AcquiredAt: t0.Add(at), ExpiresAt: t0.Add(at + ttl), TTL: ttl}
}

func TestReadmit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, s *Store)
		lease   Lease
		check   func(error) bool
	}{
		{name: "granted between the state and the crash", lease: lost("x", "p2", time.Second, time.Minute), check: nil},
		{name: "granted in the state's millisecond", lease: lost("x", "p2", 0, time.Minute), check: nil},
		{name: "granted before the state: it was in it, so it ended since", lease: lost("x", "p2", -time.Millisecond, time.Minute), check: IsUnknownLease},
		{name: "granted after the restore, by this store", lease: lost("x", "p2", 6*time.Second, time.Minute), check: IsUnknownLease},
		{name: "expired", lease: lost("x", "p2", time.Second, 2*time.Second), check: func(err error) bool { return EndReason(err) == Expired }},
		{name: "its proxy is gone", lease: lost("x", "p3", time.Second, time.Minute), check: func(err error) bool { return EndReason(err) == ProxyDeleted }},
		{name: "its proxy is full", lease: lost("x", "p1", time.Second, time.Minute), check: IsNoRoom},
		{name: "leased to capacity since", prepare: func(t *testing.T, s *Store) { mustAcquire(t, s, AcquireRequest{}) },
			lease: lost("x", "p2", time.Second, time.Minute), check: IsNoRoom},
		{name: "released since", prepare: func(t *testing.T, s *Store) {
			if _, err := s.Readmit(lost("x", "p2", time.Second, time.Minute)); err != nil {
				t.Fatal(err)
			}
			s.Release("x")
		}, lease: lost("x", "p2", time.Second, time.Minute), check: func(err error) bool { return EndReason(err) == Released }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := crashed(t)
			if tc.prepare != nil {
				tc.prepare(t, s)
			}
			var events []Event
			defer s.Subscribe(func(ev Event) { events = append(events, ev) })()
			before := s.Revision()
			got, err := s.Readmit(tc.lease)
			if bad := checkInvariants(s); len(bad) > 0 {
				t.Fatalf("invariants: %q", bad)
			}
			if tc.check != nil {
				if err == nil || !tc.check(err) {
					t.Fatalf("Readmit = %+v, %v; want the error this case is about", got, err)
				}
				if s.Revision() != before || len(events) != 0 {
					t.Errorf("a refused readmit changed the store: revision %d → %d, %d events", before, s.Revision(), len(events))
				}
				return
			}
			if err != nil {
				t.Fatalf("Readmit: %v", err)
			}
			want := tc.lease
			want.Proxy = px("ns", "p2", 2)
			want.Revision = before + 1
			if d := cmp.Diff(want, *got); d != "" {
				t.Errorf("readmitted lease (-want +got):\n%s", d)
			}
			if len(events) != 1 || events[0].Type != Added || events[0].Reason != Readmitted {
				t.Errorf("events %+v, want one Added/Readmitted", events)
			}
			// It holds its proxy: p2 is taken, and its holder renews it.
			if _, err := s.Acquire(AcquireRequest{}); !IsNoMatch(err) {
				t.Errorf("p2 is free after the readmit: %v", err)
			}
			if _, err := s.RenewAs("h", "x", time.Minute); err != nil {
				t.Errorf("renew of the readmitted lease: %v", err)
			}
			// A second readmit (a retry) answers the live lease, unchanged.
			again, err := s.Readmit(tc.lease)
			if err != nil || again.Revision != got.Revision+1 {
				t.Errorf("second Readmit = %+v, %v; want the live lease", again, err)
			}
		})
	}
}

// Without a restored state nothing is readmitted, and a state without its
// time (written by an older operator) opens no window.
func TestReadmitNeedsARestore(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	s.UpsertProxy(px("ns", "p2", 2))
	if _, err := s.Readmit(lost("x", "p2", 0, time.Minute)); !IsUnknownLease(err) {
		t.Errorf("no restore: %v", err)
	}
	o, _ := newTestStore(t, Options{})
	o.UpsertProxy(px("ns", "p2", 2))
	if err := o.Restore(State{Revision: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Readmit(lost("x", "p2", 0, time.Minute)); !IsUnknownLease(err) {
		t.Errorf("a state without TakenAt: %v", err)
	}
}

// The kept lease of the state is live and answered as it is.
func TestReadmitOfAKeptLease(t *testing.T) {
	s, kept := crashed(t)
	got, err := s.Readmit(Lease{ID: kept.ID, Namespace: "ns", Proxy: ProxyInfo{Namespace: "ns", Name: "p1"}, AcquiredAt: t0, ExpiresAt: t0.Add(time.Minute)})
	if err != nil || got.ID != kept.ID || got.Holder != kept.Holder {
		t.Errorf("Readmit of a kept lease = %+v, %v", got, err)
	}
}

// cools reports whether ns/proxy is cooling for target on s: a lease for
// target there finds no match, and the only reason is a cooldown.
func cools(t *testing.T, s *Store, proxy, target string) bool {
	t.Helper()
	l, err := s.Acquire(AcquireRequest{Selector: map[string]string{"name": proxy}, Target: target})
	var nm *NoMatchError
	if errors.As(err, &nm) {
		return nm.InCooldown > 0
	}
	if err != nil {
		t.Fatalf("probe acquire on %s: %v", proxy, err)
	}
	s.Release(l.ID) // free again for the next probe
	return false
}

// A report on a lease a crash lost starts its cooldown and brings nothing
// back (its holder may have released it before the crash); a report outside
// the readmit window, or after the lease's report window, changes nothing.
func TestReportLost(t *testing.T) {
	for _, tc := range []struct {
		name           string
		lease          Lease
		result, target string
		wantErr        func(error) bool
		coolTarget     string // "" = no cooldown expected
	}{
		{name: "banned", lease: lost("x", "p2", time.Second, time.Minute), result: ResultBanned, coolTarget: "site"},
		{name: "rate limited, another target", lease: lost("x", "p2", time.Second, time.Minute), result: ResultRateLimited, target: "other", coolTarget: "other"},
		{name: "ok cools nothing", lease: lost("x", "p2", time.Second, time.Minute), result: ResultOK},
		{name: "expired within the report window", lease: lost("x", "p2", time.Second, time.Second), result: ResultBanned, coolTarget: "site"},
		{name: "granted before the state", lease: lost("x", "p2", -time.Millisecond, time.Minute), result: ResultBanned, wantErr: IsUnknownLease},
		{name: "granted after the restore", lease: lost("x", "p2", 6*time.Second, time.Minute), result: ResultBanned, wantErr: IsUnknownLease},
		{name: "invalid result", lease: lost("x", "p2", time.Second, time.Minute), result: "meh", wantErr: func(err error) bool { return errors.Is(err, ErrInvalidResult) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := crashed(t)
			s.UpsertProxy(px("ns", "p2", 2, "name", "p2"))
			var events []Event
			defer s.Subscribe(func(ev Event) { events = append(events, ev) })()
			before := s.Revision()
			err := s.ReportLost(tc.lease, tc.result, tc.target)
			if bad := checkInvariants(s); len(bad) > 0 {
				t.Fatalf("invariants: %q", bad)
			}
			if tc.wantErr != nil {
				if err == nil || !tc.wantErr(err) {
					t.Fatalf("ReportLost = %v; want the error this case is about", err)
				}
			} else if err != nil {
				t.Fatalf("ReportLost: %v", err)
			}
			if _, ok := s.Get("x"); ok || s.Revision() != before || len(events) != 0 {
				t.Errorf("the report took the lease back: live %v, revision %d → %d, %d events", ok, before, s.Revision(), len(events))
			}
			for _, target := range []string{"site", "other"} {
				if got, want := cools(t, s, "p2", target), target == tc.coolTarget; got != want {
					t.Errorf("p2 cooling for %q: %v, want %v", target, got, want)
				}
			}
		})
	}
}

// Past its report window (its expiry plus the cooldown window) a lost lease
// takes no report; a lease the store knows is reported on as by ReportAs.
func TestReportLostWindowAndKnownLeases(t *testing.T) {
	s, kept := crashed(t)
	s.StateLost()                                      // any grant time qualifies now
	old := lost("y", "p2", -time.Hour, 50*time.Minute) // expired 10 minutes ago
	if err := s.ReportLost(old, ResultBanned, ""); !IsUnknownLease(err) {
		t.Errorf("a report 10 minutes after the lost lease expired: %v, want unknown", err)
	}
	if err := s.ReportLost(Lease{ID: kept.ID, AcquiredAt: t0.Add(-time.Hour)}, ResultRateLimited, "site"); err != nil {
		t.Fatal(err)
	}
	if l, ok := s.Get(kept.ID); !ok || l.LastResult != ResultRateLimited {
		t.Errorf("the kept lease after a report through ReportLost: %+v, %v", l, ok)
	}
	s.Freeze()
	if err := s.ReportLost(lost("x", "p2", time.Second, time.Minute), ResultBanned, ""); !errors.Is(err, ErrFrozen) {
		t.Errorf("a frozen store: %v", err)
	}
}

// A state that could not be read (StateLost) opens the readmit window to
// every lease granted before now: the checkpoint held them all.
func TestStateLostReadmitsAnyProvenLease(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxLeasesPerProxy: 1})
	s.UpsertProxy(px("ns", "p2", 2))
	old := lost("x", "p2", -time.Hour, 2*time.Hour)
	if _, err := s.Readmit(old); !IsUnknownLease(err) {
		t.Fatalf("control: before StateLost: %v", err)
	}
	s.StateLost()
	fc.Step(time.Second)
	if _, err := s.Readmit(lost("z", "p2", 500*time.Millisecond, time.Hour)); !IsUnknownLease(err) {
		t.Errorf("a lease granted after the state was lost (by this store): %v, want unknown", err)
	}
	if _, err := s.Readmit(lost("e", "p2", -time.Hour, 30*time.Minute)); EndReason(err) != Expired {
		t.Errorf("an expired lease: %v, want ended (expired)", err)
	}
	if got, err := s.Readmit(old); err != nil || got.ID != "x" {
		t.Errorf("Readmit after StateLost = %+v, %v", got, err)
	}
}
