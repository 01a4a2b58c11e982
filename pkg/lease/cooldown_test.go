package lease

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A cooling report must be about a target: a report that names none on a
// lease for none would take the proxy from every tenant for every site.
func TestReportNeedsATarget(t *testing.T) {
	for _, result := range []string{ResultRateLimited, ResultBanned} {
		t.Run(result, func(t *testing.T) {
			s, _ := newTestStore(t, Options{})
			s.UpsertProxy(px("ns", "p", 1))
			l := mustAcquire(t, s, AcquireRequest{Holder: "hostile"})
			err := s.Report(l.ID, result, "")
			if !IsNoTarget(err) {
				t.Fatalf("a %s report without any target: %v, want ErrNoTarget", result, err)
			}
			if got, _ := s.Get(l.ID); got.LastResult != "" {
				t.Errorf("a refused report recorded LastResult %q", got.LastResult)
			}
			if err := s.Report(l.ID, ResultOK, ""); err != nil {
				t.Errorf("an ok report needs no target: %v", err)
			}
			s.Release(l.ID)
			if err := s.Report(l.ID, result, ""); !IsNoTarget(err) {
				t.Errorf("after release: %v, want ErrNoTarget", err)
			}
			for _, target := range []string{"", "victim.example"} {
				v, err := s.Acquire(AcquireRequest{Holder: "victim", Target: target})
				if err != nil {
					t.Fatalf("another holder's lease for %q after the refused reports: %v", target, err)
				}
				s.Release(v.ID)
			}
			if err := s.Report(l.ID, result, "site.example"); err != nil {
				t.Fatalf("a report naming its target within the window: %v", err)
			}
			if _, err := s.Acquire(AcquireRequest{Target: "site.example"}); !IsNoMatch(err) {
				t.Errorf("the named target got the proxy during its cooldown: %v", err)
			}
		})
	}
}

// One holder's reports run at most MaxCooldownsPerHolder cooldowns: the
// limit counts the lease's holder (not the caller), counts running
// cooldowns only, lets a running one be extended, leaves other holders
// alone and survives a checkpoint.
func TestCooldownsPerHolderAreBounded(t *testing.T) {
	const limit = 3
	s, fc := newTestStore(t, Options{MaxCooldownsPerHolder: limit, CooldownWindow: time.Minute})
	s.UpsertProxy(px("ns", "p", 1))
	report := func(holder, target string) error {
		t.Helper()
		l := mustAcquire(t, s, AcquireRequest{Holder: holder})
		defer s.Release(l.ID)
		return s.Report(l.ID, ResultBanned, target) // AnyHolder: counted to holder all the same
	}
	for i := range limit {
		if err := report("a", fmt.Sprintf("t%d", i)); err != nil {
			t.Fatalf("report %d of %d: %v", i+1, limit, err)
		}
	}
	err := report("a", "one-more")
	var le *CooldownLimitError
	if !errors.As(err, &le) || le.Holder != "a" || le.Max != limit {
		t.Fatalf("report past the limit: %v, want a *CooldownLimitError for a at %d", err, limit)
	}
	if l, err := s.Acquire(AcquireRequest{Target: "one-more"}); err != nil {
		t.Errorf("a refused report cooled its target: %v", err)
	} else {
		s.Release(l.ID)
	}
	if err := report("a", "t0"); err != nil {
		t.Errorf("extending a running cooldown past the limit: %v", err)
	}
	if err := report("b", "other"); err != nil {
		t.Errorf("another holder's report while a is at its limit: %v", err)
	}

	st, _ := s.State()
	if got := cooledBy(st, "a"); got != limit {
		t.Errorf("the state counts %d cooldowns of a, want %d", got, limit)
	}
	r, err := New(Options{MaxCooldownsPerHolder: limit, CooldownWindow: time.Minute, NewID: seqIDs()}, fc)
	if err != nil {
		t.Fatal(err)
	}
	r.UpsertProxy(px("ns", "p", 1))
	if err := r.Restore(st); err != nil {
		t.Fatal(err)
	}
	s = r
	if err := report("a", "after-restore"); !IsCooldownLimit(err) {
		t.Errorf("a report past the limit after a restore: %v, want *CooldownLimitError", err)
	}

	fc.Step(time.Minute)
	if err := report("a", "after-window"); err != nil {
		t.Errorf("a report once a's cooldowns ended: %v", err)
	}
}

func cooledBy(st State, holder string) int {
	n := 0
	for _, c := range st.Cooldowns {
		if c.Holder == holder {
			n++
		}
	}
	return n
}

// A lease lost in a crash counts its reports to its holder too.
func TestReportLostCountsToItsHolder(t *testing.T) {
	s, fc := newTestStore(t, Options{MaxCooldownsPerHolder: 1})
	s.UpsertProxy(px("ns", "p2", 1))
	s.StateLost()
	fc.Step(time.Second)
	if err := s.ReportLost(lost("x", "p2", 0, time.Minute), ResultBanned, "one"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportLost(lost("y", "p2", 0, time.Minute), ResultBanned, "two"); !IsCooldownLimit(err) {
		t.Errorf("a second lost lease of the same holder past the limit: %v, want *CooldownLimitError", err)
	}
	if err := s.ReportLost(lost("y", "p2", 0, time.Minute), ResultBanned, "one"); err != nil {
		t.Errorf("extending the running cooldown: %v", err)
	}
}

// CoolingAs answers for any target, not only the lease's own: a cooldown a
// report through an earlier lease started on the same proxy shows on a
// later lease granted for another target, until its window ends; only the
// holder may ask.
func TestCoolingAsAnswersForAnyTarget(t *testing.T) {
	s, fc := newTestStore(t, Options{CooldownWindow: time.Minute})
	s.UpsertProxy(px("ns", "p", 1))
	first := mustAcquire(t, s, AcquireRequest{Holder: "http:a", Target: "a.example"})
	if err := s.ReportAs("http:a", first.ID, ResultRateLimited, "site.example"); err != nil {
		t.Fatal(err)
	}
	cooledAt := fc.Now()
	s.Release(first.ID)
	fc.Step(10 * time.Second)
	// Granted: the proxy cools for site.example only.
	l := mustAcquire(t, s, AcquireRequest{Holder: "http:a", Target: "background.example"})
	for _, tc := range []struct {
		target string
		want   time.Time
	}{
		{"site.example", cooledAt.Add(time.Minute)},
		{"background.example", time.Time{}},
		{"other.example", time.Time{}},
	} {
		got, err := s.CoolingAs("http:a", l.ID, tc.target)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("CoolingAs(%s) = %v, %v; want %v", tc.target, got, err, tc.want)
		}
	}
	if _, err := s.CoolingAs("http:mallory", l.ID, "site.example"); !IsNotHolder(err) {
		t.Errorf("another holder asked: %v, want NotHolder", err)
	}
	if _, err := s.CoolingAs("http:a", "no-such-lease", "site.example"); !IsUnknownLease(err) {
		t.Errorf("an unknown lease: %v, want UnknownLease", err)
	}
	fc.Step(time.Minute)
	if got, err := s.CoolingAs("http:a", l.ID, "site.example"); err != nil || !got.IsZero() {
		t.Errorf("after the window: %v, %v; want the zero time", got, err)
	}
}
