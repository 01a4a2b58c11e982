package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// remembered says, for each ID, how Renew answers: "ended" while the store
// remembers the lease, "unknown" once it forgot it.
func remembered(t *testing.T, s *Store, ids []string) []string {
	t.Helper()
	var got []string
	for _, id := range ids {
		_, err := s.Renew(id, 0)
		switch {
		case IsLeaseEnded(err):
			got = append(got, "ended")
		case IsUnknownLease(err):
			got = append(got, "unknown")
		default:
			t.Fatalf("Renew(%s) on an ended lease: %v", id, err)
		}
	}
	return got
}

// churn acquires and releases n leases as holder, returning their IDs.
func churn(t *testing.T, s *Store, holder string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		l := mustAcquire(t, s, AcquireRequest{Holder: holder, Flow: holder})
		if !s.Release(l.ID) {
			t.Fatalf("Release(%s) = false", l.ID)
		}
		ids[i] = l.ID
	}
	return ids
}

func checkedInvariants(t *testing.T, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if bad := checkInvariants(s); len(bad) > 0 {
		t.Fatalf("invariants: %q", bad)
	}
}

// A holder's ended leases are remembered up to MaxEndedPerHolder, the newest
// ones; another holder's are not forgotten for it.
func TestEndedLeasesAreBoundedPerHolder(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxEndedPerHolder: 3, CooldownWindow: time.Minute})
	s.UpsertProxy(px("ns", "p", 1))
	quiet := churn(t, s, "quiet", 2)
	busy := churn(t, s, "busy", 5)
	checkedInvariants(t, s)
	want := []string{"unknown", "unknown", "ended", "ended", "ended"}
	if diff := cmp.Diff(want, remembered(t, s, busy)); diff != "" {
		t.Errorf("busy holder's ended leases (-want +got):\n%s", diff)
	}
	more := churn(t, s, "busy", 200)
	checkedInvariants(t, s)
	if diff := cmp.Diff([]string{"ended", "ended"}, remembered(t, s, quiet)); diff != "" {
		t.Errorf("quiet holder's ended leases after the busy one's churn (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"unknown", "ended", "ended", "ended"}, remembered(t, s, more[196:])); diff != "" {
		t.Errorf("busy holder's newest (-want +got):\n%s", diff)
	}
	s.mu.Lock()
	tombs, queued, held := len(s.tombs), len(s.tombQ)-s.tombHead, len(s.tombsOf["busy"].q)-s.tombsOf["busy"].head
	s.mu.Unlock()
	// 205 leases ended: 5 remembered, and the queues hold no more than
	// their compaction slack.
	if tombs != 5 || queued > 2*tombs+1024 || held > 3+64 {
		t.Errorf("after 207 ends: %d remembered, tombQ %d, busy's queue %d; want 5, ≤ %d, ≤ 67", tombs, queued, held, 2*tombs+1024)
	}

	// At the end of the report window every one is forgotten, queues too.
	fc.Step(time.Minute)
	s.Sweep()
	checkedInvariants(t, s)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tombs) != 0 || len(s.tombsOf) != 0 || len(s.tombQ)-s.tombHead != 0 || len(s.tombNames) != 0 {
		t.Errorf("after the window: tombs %d, holders %d, tombQ %d, names %d; want all 0",
			len(s.tombs), len(s.tombsOf), len(s.tombQ)-s.tombHead, len(s.tombNames))
	}
}

// The bound is what keeps memory flat under churn: with it the remembered
// leases stay at the limit, and a store without it (the negative control: a
// limit above the churn) remembers every one of the window.
func TestEndedLeasesStayBoundedUnderChurn(t *testing.T) {
	for _, tc := range []struct {
		limit, want int
	}{
		{limit: 100, want: 100},
		{limit: 1 << 30, want: 5000},
	} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			s, fc := newTestStore(t, Options{MaxEndedPerHolder: tc.limit, CooldownWindow: time.Hour})
			s.UpsertProxy(px("ns", "p", 1))
			for range 50 {
				churn(t, s, "h", 100)
				fc.Step(time.Second)
			}
			checkedInvariants(t, s)
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.tombs) != tc.want {
				t.Errorf("remembered %d ended leases, want %d", len(s.tombs), tc.want)
			}
			if q := len(s.tombQ) - s.tombHead; q > 2*tc.want+1024 {
				t.Errorf("tombQ holds %d refs for %d ended leases", q, tc.want)
			}
		})
	}
}

// A named lease forgotten early is not found by its name either, and the
// name is free to reuse as before.
func TestForgottenNamedLease(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxEndedPerHolder: 1})
	s.UpsertProxy(px("ns", "p", 1))
	l := mustAcquire(t, s, AcquireRequest{Namespace: "ns", Name: "job", Holder: "h"})
	s.Release(l.ID)
	if _, live, ok := s.LookupName("ns", "job"); !ok || live {
		t.Fatalf("LookupName after release: live %v ok %v, want an ended lease", live, ok)
	}
	churn(t, s, "h", 1)
	if id, _, ok := s.LookupName("ns", "job"); ok {
		t.Errorf("LookupName after the holder's limit passed: %s, want none", id)
	}
	checkedInvariants(t, s)
	mustAcquire(t, s, AcquireRequest{Namespace: "ns", Name: "job", Holder: "h"})
}

// A checkpoint of a store without the bound restores into one with it:
// each holder keeps its newest.
func TestRestoreKeepsTheNewestPerHolder(t *testing.T) {
	a, _ := newTestStore(t, Options{CooldownWindow: time.Minute})
	a.UpsertProxy(px("ns", "p", 1))
	ids := churn(t, a, "h", 6)
	churn(t, a, "g", 2)
	st, _ := a.State()
	b, err := New(Options{MaxEndedPerHolder: 4, CooldownWindow: time.Minute, NewID: seqIDs()}, a.clock)
	if err != nil {
		t.Fatal(err)
	}
	b.UpsertProxy(px("ns", "p", 1))
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	checkedInvariants(t, b)
	want := []string{"unknown", "unknown", "ended", "ended", "ended", "ended"}
	if diff := cmp.Diff(want, remembered(t, b, ids)); diff != "" {
		t.Errorf("restored (-want +got):\n%s", diff)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.tombsOf["g"].live; n != 2 {
		t.Errorf("holder g keeps %d, want 2", n)
	}
}
