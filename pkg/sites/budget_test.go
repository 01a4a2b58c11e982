package sites

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// TestAIMD walks one budget through the rules: it starts at the ceiling;
// a refused-report cuts it by the factor, once per signal (reports on leases
// granted before the cut do not cut again); it never goes under the floor;
// it grows by one only after the interval and only while the site used its
// whole limit; never over the ceiling.
func TestAIMD(t *testing.T) {
	p := policy("p", "example.com")
	p.MinConcurrency, p.MaxConcurrency, p.DecreaseFactor, p.IncreaseInterval = 2, 10, 0.5, 5*time.Second
	b := newBudget(p)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	grant := func(now time.Time, n int) int {
		granted := 0
		for range n {
			if b.Admit(now) != nil {
				break
			}
			b.Granted(now, 0, "p")
			b.Attach(0)
			granted++
		}
		return granted
	}
	if got := grant(at(0), 12); got != 10 {
		t.Fatalf("granted %d at the start, want the ceiling 10", got)
	}
	if r := b.Admit(at(0)); r == nil || r.Limit != 10 || r.Live != 10 {
		t.Fatalf("the 11th: %+v, want refused at limit 10, 10 live", r)
	}
	// Three reports of leases granted at 0: one cut.
	if !b.Reported(at(0), at(time.Second)) {
		t.Fatal("the first report did not cut")
	}
	for range 2 {
		if b.Reported(at(0), at(time.Second)) {
			t.Fatal("a report on a lease granted before the cut cut again")
		}
	}
	if s := b.Status(at(time.Second)); s.Limit != 5 || s.Cuts != 1 {
		t.Fatalf("after the cut: %+v, want limit 5, 1 cut", s)
	}
	// Leases end: with 5 live the site is at its limit again.
	for range 5 {
		b.Ended(at(2*time.Second), 0)
	}
	if got := grant(at(2*time.Second), 3); got != 0 {
		t.Fatalf("granted %d with 5 live at limit 5", got)
	}
	// A report on a lease granted after the cut cuts again; then the floor.
	b.Reported(at(2*time.Second), at(3*time.Second))
	b.Reported(at(3*time.Second), at(4*time.Second))
	b.Reported(at(4*time.Second), at(5*time.Second))
	if s := b.Status(at(5 * time.Second)); s.Limit != 2 {
		t.Fatalf("after cuts to the floor: limit %d, want 2", s.Limit)
	}
	// Not raised before the interval, nor after it unless used in full.
	for range 5 {
		b.Ended(at(6*time.Second), 0)
	}
	if s := b.Status(at(9 * time.Second)); s.Limit != 2 || s.Live != 0 {
		t.Fatalf("before the interval: %+v", s)
	}
	if s := b.Status(at(30 * time.Second)); s.Limit != 2 {
		t.Fatalf("an idle site's limit grew to %d", s.Limit)
	}
	// In full use again after the interval: raised by one at once, not more.
	if got := grant(at(30*time.Second), 5); got != 3 {
		t.Fatalf("granted %d, want 2 at limit 2 and one more once raised", got)
	}
	if s := b.Status(at(30 * time.Second)); s.Limit != 3 {
		t.Fatalf("limit %d, want 3", s.Limit)
	}
	// One step per interval.
	if got := grant(at(31*time.Second), 1); got != 0 {
		t.Fatal("raised twice within one interval")
	}
	if next := b.NextChange(); !next.Equal(at(35 * time.Second)) {
		t.Fatalf("next change %v, want the interval after the raise", next)
	}
	// Up to the ceiling, not over.
	for i := range 20 {
		grant(at(time.Duration(35+5*i)*time.Second), 1)
	}
	if s := b.Status(at(200 * time.Second)); s.Limit != 10 {
		t.Fatalf("limit %d after long full use, want the ceiling 10", s.Limit)
	}
}

// TestGrantRate: at most MaxGrantsPerSecond new leases a second, bursts of
// max(1, rate); the refusal says when the next one may go.
func TestGrantRate(t *testing.T) {
	p := policy("p", "example.com")
	p.MaxConcurrency, p.MaxGrantsPerSecond = 100, 2
	b := newBudget(p)
	granted := 0
	var retry time.Time
	for ms := 0; ms < 3000; ms += 10 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		if r := b.Admit(now); r != nil {
			retry = r.Retry
			continue
		}
		b.Granted(now, 0, "p")
		b.Attach(0)
		granted++
	}
	// A burst of 2, then 2 a second for 3 s.
	if granted < 7 || granted > 8 {
		t.Fatalf("granted %d in 3 s at 2 a second, want 7 or 8", granted)
	}
	if retry.IsZero() {
		t.Fatal("a refusal for the rate says no retry time")
	}
}

// TestRefusedShare counts reports over leases ended in the last 30–60 s.
func TestRefusedShare(t *testing.T) {
	b := newBudget(policy("p", "example.com"))
	for range 4 {
		b.Granted(t0, 0, "p")
		b.Attach(0)
	}
	b.Reported(t0, t0)
	for range 4 {
		b.Ended(t0.Add(time.Second), 0)
	}
	got := []float64{b.Status(t0.Add(time.Second)).RefusedShare, b.Status(t0.Add(45 * time.Second)).RefusedShare,
		b.Status(t0.Add(2 * time.Minute)).RefusedShare}
	if d := cmp.Diff([]float64{0.25, 0.25, 0}, got); d != "" {
		t.Errorf("share now, after 45 s, after 2 min (-want +got):\n%s", d)
	}
}

// TestCarry: a policy's update keeps its adapted limit, within the new
// floor and ceiling.
func TestCarry(t *testing.T) {
	p := policy("p", "example.com")
	p.MaxConcurrency = 10
	old := NewTable([]Policy{p})
	for range 10 {
		old.For("example.com").Attach(0)
	}
	old.For("example.com").Reported(t0, t0)
	p.MaxConcurrency = 5
	p.MinConcurrency = 1
	next := NewTable([]Policy{p})
	next.Carry(old)
	if got := next.For("example.com").Status(t0).Limit; got != 5 {
		t.Fatalf("limit %d, want the cut 7 clamped to the new ceiling 5", got)
	}
}

// TestAdaptedRate: a cut sets the rate to the factor of the grants of the
// last second (a site without a rate bound gets one), refuses what is over
// it, and after the interval in full use raises it by half of the cut.
func TestAdaptedRate(t *testing.T) {
	p := policy("p", "example.com")
	p.MaxConcurrency, p.DecreaseFactor, p.IncreaseInterval = 1000, 0.5, 5*time.Second
	b := newBudget(p)
	// 20 grants a second, each lease ending at once.
	var at time.Time
	for i := range 40 {
		at = t0.Add(time.Duration(i) * 50 * time.Millisecond)
		if r := b.Admit(at); r != nil {
			t.Fatalf("refused before any cut: %v", r)
		}
		b.Granted(at, 0, "p")
		b.Attach(0)
		b.Ended(at, 0)
	}
	if !b.Reported(at, at) {
		t.Fatal("no cut")
	}
	st := b.Status(at)
	if st.Rate < 9 || st.Rate > 11 {
		t.Fatalf("rate %v after the cut, want about half of 20", st.Rate)
	}
	// Over the next 2 s at one attempt per 10 ms: about rate × 2 granted.
	granted := 0
	for ms := 10; ms <= 2000; ms += 10 {
		now := at.Add(time.Duration(ms) * time.Millisecond)
		if b.Admit(now) == nil {
			b.Granted(now, 0, "p")
			b.Attach(0)
			b.Ended(now, 0)
			granted++
		}
	}
	if granted < 18 || granted > 24 {
		t.Fatalf("granted %d in 2 s at about 10 a second", granted)
	}
	before := b.Status(at.Add(2 * time.Second)).Rate
	if b.Admit(at.Add(5*time.Second+time.Millisecond)) != nil && b.Status(at.Add(5*time.Second+time.Millisecond)).Rate <= before {
		t.Fatal("the rate was not raised after the interval in full use")
	}
	if got := b.Status(at.Add(5*time.Second + time.Millisecond)).Rate; got < before+4 || got > before+6 {
		t.Fatalf("rate %v after the raise, want %v plus half of the cut (about 5)", got, before)
	}
}

// TestTierBudget: each higher tier of a ladder has its own bound within the
// limit (none past HigherTiers, none on the first tier), counted per tier;
// the status shows the newest grant's tier and the live leases per tier.
func TestTierBudget(t *testing.T) {
	p := policy("p", "example.com")
	p.MaxConcurrency, p.HigherTiers = 10, []int{2, 0}
	b := newBudget(p)
	grant := func(tier int) *Refusal {
		if r := b.Admit(t0); r != nil {
			return r
		}
		if r := b.AdmitTier(tier); r != nil {
			return r
		}
		b.Granted(t0, tier, "p")
		b.Attach(tier)
		return nil
	}
	for _, tier := range []int{0, 1, 1, 3, 0} {
		if r := grant(tier); r != nil {
			t.Fatalf("tier %d: %v", tier, r)
		}
	}
	if d := cmp.Diff(&Refusal{Policy: "p", Limit: 2, Live: 2, Tier: 1}, grant(1)); d != "" {
		t.Errorf("a third on tier 1 (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&Refusal{Policy: "p", Limit: 0, Live: 0, Tier: 2}, grant(2)); d != "" {
		t.Errorf("tier 2 of budget 0 (-want +got):\n%s", d)
	}
	want := Status{Policy: "p", Limit: 10, Live: 5, Tier: 0, TierLive: []int{2, 2, 0, 1}}
	if d := cmp.Diff(want, b.Status(t0)); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
	b.Ended(t0, 1)
	b.Ended(t0, 3)
	if r := grant(1); r != nil {
		t.Fatalf("tier 1 after an end: %v", r)
	}
	want = Status{Policy: "p", Limit: 10, Live: 4, Tier: 1, TierLive: []int{2, 2, 0}}
	if d := cmp.Diff(want, b.Status(t0)); d != "" {
		t.Errorf("status after ends (-want +got):\n%s", d)
	}
	if got := (&Refusal{Policy: "p", Limit: 2, Live: 2, Tier: 1}).Error(); got != `SitePolicy "p": the site's 2 leases on tier 1 (its selector 2) are in use` {
		t.Errorf("the refusal says %q", got)
	}
	// Without higher tiers the status lists none.
	plain := newBudget(policy("q", "example.org"))
	plain.Attach(0)
	if st := plain.Status(t0); st.TierLive != nil {
		t.Errorf("tierLive %v without a ladder", st.TierLive)
	}
}

// TestProxyInterval: a proxy granted for the site is not ready for it again
// before the interval passes (another proxy is); NextChange says when it
// is, and advancing past it opens it (a refused lease may now be granted);
// a policy update keeps the spacing; thousands of grants keep no more
// than the interval's.
func TestProxyInterval(t *testing.T) {
	p := policy("p", "example.com")
	p.ProxyInterval = time.Second
	b := newBudget(p)
	if !b.Spaced() || newBudget(policy("q", "example.org")).Spaced() {
		t.Fatal("Spaced: want true with an interval, false without")
	}
	b.Granted(t0, 0, "ns/a")
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	if b.ProxyReady("ns/a", at(999*time.Millisecond)) || !b.ProxyReady("ns/b", at(0)) {
		t.Fatal("a within its interval is ready, or b (never granted) is not")
	}
	if got := b.NextChange(); !got.Equal(at(time.Second)) {
		t.Fatalf("NextChange = %v, want the interval's end %v", got, at(time.Second))
	}
	b.Granted(at(500*time.Millisecond), 0, "ns/a") // a second grant moves a's interval on
	if b.Advance(at(time.Second)) || b.ProxyReady("ns/a", at(time.Second)) {
		t.Fatal("the first grant's end freed a, granted again since")
	}
	if !b.Advance(at(1500*time.Millisecond)) || !b.ProxyReady("ns/a", at(1500*time.Millisecond)) {
		t.Fatal("a's interval passed: want it ready, and the advance to say so")
	}
	if got := b.NextChange(); !got.IsZero() {
		t.Fatalf("NextChange with nothing spaced = %v, want zero", got)
	}
	// Carried over a policy update.
	b.Granted(at(2*time.Second), 0, "ns/a")
	next := newBudget(p)
	next.carry(b)
	if next.ProxyReady("ns/a", at(2500*time.Millisecond)) {
		t.Fatal("a policy update forgot a's interval")
	}
	// Bounded: a grant a millisecond for 10 s keeps about a second's.
	for i := range 10000 {
		next.Granted(at(3*time.Second+time.Duration(i)*time.Millisecond), 0, "ns/"+strconv.Itoa(i%50))
	}
	if n := len(next.spaced) - next.spacedHead; n > 1001 || len(next.lastGrant) > 50 {
		t.Errorf("%d grants and %d proxies remembered, want at most a second's (1,000) and 50", n, len(next.lastGrant))
	}
	if len(next.spaced) > 4000 {
		t.Errorf("the grant queue holds %d slots: not compacted", len(next.spaced))
	}
}
