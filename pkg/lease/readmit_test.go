package lease

import (
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
