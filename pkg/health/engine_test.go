package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

func TestNewRequiresReader(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a Reader succeeded")
	}
	e, err := New(Options{Reader: &fakeReader{}})
	if err != nil {
		t.Fatal(err)
	}
	got := []any{e.opts.Workers, e.opts.Tick, e.opts.MinReportInterval, cap(e.events), e.opts.QueueSize, e.NeedLeaderElection()}
	want := []any{8, time.Second, 60 * time.Second, 64, 1024, true}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}

// TestThresholds drives one proxy through a sequence of probe results, one
// per interval, and checks after every probe whether an event was emitted
// and which verdict it carried. Script: '+' success, '-' failure. Expected:
// '.' no event, 'H' healthy reported, 'U' unhealthy reported.
func TestThresholds(t *testing.T) {
	tests := []struct {
		name             string
		success, failure int32
		script, want     string
	}{
		{"first success is the first verdict", 1, 3, "+", "H"},
		{"first verdict needs a full failure run", 1, 3, "---", "..U"},
		{"first healthy verdict needs successThreshold", 2, 3, "++", ".H"},
		{"failureThreshold 1 decides on the first failure", 3, 1, "++-", "..U"},
		{"interrupted failure runs never flip", 1, 3, "+--+--+", "H......"},
		{"flip at exactly failureThreshold", 1, 3, "+---", "H..U"},
		{"recovery needs successThreshold in a row", 2, 2, "+--+-++", "..U...H"},
		{"steady verdicts emit nothing", 1, 1, "+++---", "H..U.."},
		{"flapping above the thresholds", 1, 1, "+-+-", "HUHU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			k := key("a")
			h.reader.set(newProxy("a", thresholds(tt.success, tt.failure)))
			var got strings.Builder
			for i, c := range tt.script {
				r := ok(10)
				if c == '-' {
					r = fail()
				}
				h.prober.push(k, r)
				var probed []types.NamespacedName
				if i == 0 {
					probed = h.round()
				} else {
					probed = h.advance(10 * time.Second)
				}
				if d := cmp.Diff([]types.NamespacedName{k}, probed); d != "" {
					t.Fatalf("step %d probed (-want +got):\n%s", i, d)
				}
				evs := h.events()
				switch {
				case len(evs) == 0:
					got.WriteByte('.')
				case len(evs) > 1:
					t.Fatalf("step %d: %d events", i, len(evs))
				default:
					snap, ok := h.e.Snapshot(k)
					if !ok {
						t.Fatalf("step %d: event without snapshot", i)
					}
					if snap.Healthy {
						got.WriteByte('H')
					} else {
						got.WriteByte('U')
					}
				}
			}
			if got.String() != tt.want {
				t.Errorf("events = %q, want %q (script %q)", got.String(), tt.want, tt.script)
			}
		})
	}
}

func TestSnapshotContent(t *testing.T) {
	h := newHarness(t, Options{})
	k := key("a")
	h.reader.set(newProxy("a", thresholds(1, 1)))
	h.prober.push(k, ok(42))
	h.round()
	got, found := h.e.Snapshot(k)
	want := Snapshot{
		Healthy: true, Latency: 42 * time.Millisecond, CheckedAt: t0,
		Reason:   crawlv1alpha1.ReasonProbeSucceeded,
		Message:  "probe of http://origin.test/ through http://10.0.0.1:3128 answered 200",
		ProxyURL: "http://10.0.0.1:3128",
	}
	if !found {
		t.Fatal("no snapshot after the first verdict")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("healthy snapshot (-want +got):\n%s", d)
	}
	if got.LatencyMillis() != 42 {
		t.Errorf("LatencyMillis = %d, want 42", got.LatencyMillis())
	}

	h.prober.push(k, fail())
	h.advance(10 * time.Second)
	got, _ = h.e.Snapshot(k)
	want = Snapshot{
		Healthy: false, CheckedAt: t0.Add(10 * time.Second),
		Reason:   crawlv1alpha1.ReasonProbeFailed,
		Message:  "1 probes in a row of http://origin.test/ through http://10.0.0.1:3128 failed; last: scripted probe failure",
		ProxyURL: "http://10.0.0.1:3128",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("unhealthy snapshot (-want +got):\n%s", d)
	}
	if _, found := h.e.Snapshot(key("other")); found {
		t.Error("snapshot of an unknown proxy")
	}
}

func TestLongErrorMessagesAreTruncated(t *testing.T) {
	h := newHarness(t, Options{})
	k := key("a")
	h.reader.set(newProxy("a", thresholds(1, 1)))
	h.prober.push(k, result{err: errors.New(strings.Repeat("é", 2000))})
	h.round()
	snap, _ := h.e.Snapshot(k)
	if len(snap.Message) > maxMessageLen || !strings.HasSuffix(snap.Message, "...") {
		t.Errorf("message of %d bytes, suffix %q", len(snap.Message), snap.Message[len(snap.Message)-5:])
	}
	if !strings.Contains(snap.Message, "é") || strings.ContainsRune(snap.Message, '\uFFFD') {
		t.Error("truncation broke UTF-8")
	}
}

func TestLatencyChanged(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	tests := []struct {
		reported, latency time.Duration
		want              bool
	}{
		{0, ms(20), false}, // max(20ms, 50% of 0) = 20ms
		{0, ms(21), true},
		{ms(10), ms(30), false},
		{ms(10), ms(31), true},
		{ms(100), ms(150), false}, // 50% of 100ms
		{ms(100), ms(151), true},
		{ms(100), ms(50), false},
		{ms(100), ms(49), true},
		{ms(1000), ms(1400), false},
		{ms(1000), ms(1501), true},
		{ms(40), ms(60), false}, // 40↔60 jitter: never reported
		{ms(40), ms(61), true},  // 40↔61: reported, but the rate limit bounds it
	}
	for _, tt := range tests {
		if got := latencyChanged(tt.reported, tt.latency); got != tt.want {
			t.Errorf("latencyChanged(%s, %s) = %v, want %v", tt.reported, tt.latency, got, tt.want)
		}
	}
}

// TestLatencyRateLimit: while healthy, a significant latency change is
// reported at most once per MinReportInterval, counted from the last report.
func TestLatencyRateLimit(t *testing.T) {
	h := newHarness(t, Options{MinReportInterval: 60 * time.Second})
	k := key("a")
	h.reader.set(newProxy("a"))
	steps := []struct {
		r    result
		want bool // event expected
	}{
		{ok(100), true},  // t0: first verdict, reports 100ms
		{ok(300), false}, // t10: big change, but only 10s since the report
		{ok(300), false}, // t20
		{ok(300), false}, // t30
		{ok(300), false}, // t40
		{ok(300), false}, // t50
		{ok(300), true},  // t60: 60s since t0
		{ok(340), false}, // t70: within 50% of 300
		{ok(100), false}, // t80: big change, 20s since t60
		{fail(), false},  // t90: below failureThreshold, no latency either
		{ok(100), false}, // t100: 40s since t60
		{ok(100), false}, // t110: 50s
		{ok(100), true},  // t120: 60s since t60, reports 100ms
	}
	for i, s := range steps {
		h.prober.push(k, s.r)
		if i == 0 {
			h.round()
		} else {
			h.advance(10 * time.Second)
		}
		if got := len(h.events()) == 1; got != s.want {
			t.Fatalf("t0+%ds: event=%v, want %v", i*10, got, s.want)
		}
	}
	snap, _ := h.e.Snapshot(k)
	if snap.Latency != 100*time.Millisecond || !snap.CheckedAt.Equal(t0.Add(120*time.Second)) {
		t.Errorf("snapshot latency %s at %s, want 100ms at t0+120s", snap.Latency, snap.CheckedAt.Sub(t0))
	}
}

// TestLatencyOnlyWhileHealthy: successes below successThreshold of a proxy
// reported unhealthy emit nothing, however much their latency moves; once
// healthy, the same moves are reported (negative control).
func TestLatencyOnlyWhileHealthy(t *testing.T) {
	h := newHarness(t, Options{MinReportInterval: time.Millisecond})
	k := key("a")
	h.reader.set(newProxy("a", thresholds(3, 1)))
	h.prober.push(k, fail(), ok(5), ok(900), ok(5))
	h.round()
	if evs := h.events(); len(evs) != 1 {
		t.Fatalf("first failure: %d events, want the unhealthy verdict", len(evs))
	}
	for i := range 2 {
		h.advance(10 * time.Second)
		if evs := h.events(); len(evs) != 0 {
			t.Fatalf("success %d below the threshold emitted %d events", i+1, len(evs))
		}
	}
	h.advance(10 * time.Second)
	if snap, _ := h.e.Snapshot(k); len(h.events()) != 1 || !snap.Healthy || snap.Latency != 5*time.Millisecond {
		t.Fatalf("third success: snapshot %+v, want healthy at 5ms", snap)
	}
	// Negative control: the same latency jump while healthy is reported.
	h.prober.push(k, ok(900))
	h.advance(10 * time.Second)
	if snap, _ := h.e.Snapshot(k); len(h.events()) != 1 || snap.Latency != 900*time.Millisecond {
		t.Fatalf("latency jump while healthy not reported: %+v", snap)
	}
}

// TestSeedingOnHandover: a new engine seeds state from the Healthy condition
// a previous leader wrote: the verdict is kept (no first-verdict event, no
// snapshot), counters are zeroed (a transition still needs a full run), the
// first probe is jittered, and the rate limit continues from
// lastHealthCheckTime.
func TestSeedingOnHandover(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		h := newHarness(t, Options{MinReportInterval: 60 * time.Second})
		h.e.jitter = func(d time.Duration) time.Duration { return 7 * time.Second }
		k := key("a")
		h.reader.set(newProxy("a", healthyCond(metav1.ConditionTrue, 50, t0.Add(-30*time.Second))))
		if got := h.round(); len(got) != 0 {
			t.Fatalf("seeded proxy probed at once: %v", got)
		}
		h.prober.push(k, ok(500), ok(500), fail(), fail(), fail())
		if got := h.advance(7 * time.Second); len(got) != 1 {
			t.Fatalf("jittered first probe at +7s: probed %v", got)
		}
		// 500ms vs 50ms is a change, but the last report (status) was 37s ago.
		if evs := h.events(); len(evs) != 0 {
			t.Fatalf("seeded healthy proxy emitted %d events on its first probe", len(evs))
		}
		if _, found := h.e.Snapshot(k); found {
			t.Fatal("a seeded, unchanged proxy has a snapshot: the reconciler would rewrite status")
		}
		h.advance(10 * time.Second) // t0+17: 47s since the report
		h.advance(10 * time.Second) // fail 1 (t0+27)
		h.advance(10 * time.Second) // fail 2
		if evs := h.events(); len(evs) != 0 {
			t.Fatalf("%d events before the failure threshold", len(evs))
		}
		h.advance(10 * time.Second) // fail 3
		if snap, _ := h.e.Snapshot(k); len(h.events()) != 1 || snap.Healthy {
			t.Fatalf("third failure did not flip: %+v", snap)
		}
	})
	t.Run("rate limit continues from lastHealthCheckTime", func(t *testing.T) {
		h := newHarness(t, Options{MinReportInterval: 60 * time.Second})
		k := key("a")
		h.reader.set(newProxy("a", healthyCond(metav1.ConditionTrue, 50, t0.Add(-55*time.Second))))
		h.prober.push(k, ok(500), ok(500))
		h.round() // jitter 0: probed at t0, 55s after the report
		if len(h.events()) != 0 {
			t.Fatal("latency reported 55s after the previous report")
		}
		h.advance(10 * time.Second)
		if snap, _ := h.e.Snapshot(k); len(h.events()) != 1 || snap.Latency != 500*time.Millisecond {
			t.Fatalf("latency not reported 65s after the previous report: %+v", snap)
		}
	})
	t.Run("unhealthy", func(t *testing.T) {
		h := newHarness(t, Options{})
		k := key("a")
		h.reader.set(newProxy("a", thresholds(2, 1), healthyCond(metav1.ConditionFalse, 0, t0)))
		h.prober.push(k, fail(), ok(10), ok(10))
		h.round()
		if len(h.events()) != 0 {
			t.Fatal("seeded unhealthy proxy re-reported its failure")
		}
		h.advance(10 * time.Second)
		if len(h.events()) != 0 {
			t.Fatal("one success flipped a proxy with successThreshold 2")
		}
		h.advance(10 * time.Second)
		if snap, _ := h.e.Snapshot(k); len(h.events()) != 1 || !snap.Healthy {
			t.Fatalf("recovery not reported: %+v", snap)
		}
	})
	t.Run("a verdict about another address is not seeded", func(t *testing.T) {
		h := newHarness(t, Options{})
		h.e.jitter = func(d time.Duration) time.Duration { return 7 * time.Second }
		p := newProxy("a", healthyCond(metav1.ConditionTrue, 50, t0))
		p.Status.ProbedURL = "http://10.0.0.1:6443" // the endpoint's port changed since
		h.reader.set(p)
		h.prober.push(key("a"), ok(10))
		if got := h.round(); len(got) != 1 {
			t.Fatalf("probed %v at the first tick, want the proxy at once", got)
		}
		if snap, _ := h.e.Snapshot(key("a")); len(h.events()) != 1 || !snap.Healthy || snap.ProxyURL != "http://10.0.0.1:3128" {
			t.Fatalf("first verdict at the new address not reported: %+v", snap)
		}
	})
	t.Run("Unknown condition counts as never probed", func(t *testing.T) {
		h := newHarness(t, Options{})
		h.e.jitter = func(d time.Duration) time.Duration { return 7 * time.Second }
		h.reader.set(newProxy("a", healthyCond(metav1.ConditionUnknown, 0, t0)))
		if got := h.round(); len(got) != 1 {
			t.Fatalf("probed %v at the first tick, want the proxy", got)
		}
		if len(h.events()) != 1 {
			t.Fatal("first verdict not reported")
		}
	})
}

// TestNeverProbedProbesAtOnce: a proxy without a Healthy condition is probed
// at the first tick that sees it, without jitter; a seeded one is not
// (negative control).
func TestNeverProbedProbesAtOnce(t *testing.T) {
	h := newHarness(t, Options{})
	h.e.jitter = func(d time.Duration) time.Duration { return 5 * time.Second }
	h.reader.set(
		newProxy("fresh"),
		newProxy("seeded", healthyCond(metav1.ConditionTrue, 10, t0)),
	)
	if d := cmp.Diff([]types.NamespacedName{key("fresh")}, h.round()); d != "" {
		t.Errorf("first tick probed (-want +got):\n%s", d)
	}
	// At +5s: the seeded proxy's jittered first probe, and the fresh one's
	// second probe, spread across the interval by the same injected jitter
	// (due 10s - 5s after its first).
	if d := cmp.Diff([]types.NamespacedName{key("fresh"), key("seeded")}, h.advance(5*time.Second)); d != "" {
		t.Errorf("at +5s probed (-want +got):\n%s", d)
	}
	// A proxy appearing later is probed at the next tick too.
	h.reader.set(newProxy("fresh"), newProxy("seeded", healthyCond(metav1.ConditionTrue, 10, t0)), newProxy("late"))
	if d := cmp.Diff([]types.NamespacedName{key("late")}, h.advance(time.Second)); d != "" {
		t.Errorf("tick after a new proxy appeared probed (-want +got):\n%s", d)
	}
}

// TestJitterBounds: first probes after a handover, and second probes of a
// fleet that was never probed, spread across one interval.
func TestJitterBounds(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if got := randomJitter(d); got != 0 {
			t.Errorf("randomJitter(%s) = %s", d, got)
		}
	}
	for range 10000 {
		if j := randomJitter(10 * time.Second); j < 0 || j >= 10*time.Second {
			t.Fatalf("randomJitter(10s) = %s, out of [0, 10s)", j)
		}
	}

	const n = 600
	spread := func(t *testing.T, seeded bool) {
		h := newHarness(t, Options{QueueSize: 2 * n})
		h.e.jitter = randomJitter
		ps := make([]*crawlv1alpha1.Proxy, n)
		for i := range ps {
			var opts []proxyOpt
			if seeded {
				opts = append(opts, healthyCond(metav1.ConditionTrue, 10, t0))
			}
			ps[i] = newProxy(fmt.Sprintf("p%03d", i), opts...)
		}
		h.reader.set(ps...)
		if !seeded {
			if got := len(h.round()); got != n {
				t.Fatalf("never-probed fleet: %d probed at the first tick, want %d", got, n)
			}
			h.clk.Step(time.Second)
		}
		// Seeded first probes are due in [t0, t0+10s), so they go at ticks
		// t0 (jitter exactly 0 only) to t0+10s; never-probed second probes
		// are due in (t0, t0+10s] and go at ticks t0+1s to t0+10s. Every
		// proxy must go exactly once, and no busy tick far from n/10.
		ticks, quiet := 10, -1
		if seeded {
			ticks, quiet = 11, 0
		}
		seen := map[types.NamespacedName]int{}
		perTick := make([]int, ticks)
		for i := range perTick {
			probed := h.round()
			perTick[i] = len(probed)
			for _, k := range probed {
				seen[k]++
			}
			h.clk.Step(time.Second)
		}
		if len(seen) != n {
			t.Fatalf("%d of %d proxies probed within one interval (per tick %v)", len(seen), n, perTick)
		}
		for k, c := range seen {
			if c != 1 {
				t.Fatalf("%s probed %d times in one interval", k, c)
			}
		}
		for i, c := range perTick {
			if i == quiet {
				if c > 1 {
					t.Errorf("tick %d probed %d, want about 0 (per tick %v)", i, c, perTick)
				}
				continue
			}
			if c < n/30 || c > n/5 {
				t.Errorf("tick %d probed %d, want about %d (per tick %v)", i, c, n/10, perTick)
			}
		}
	}
	t.Run("seeded first probes", func(t *testing.T) { spread(t, true) })
	t.Run("never-probed second probes", func(t *testing.T) { spread(t, false) })
}

func TestPruning(t *testing.T) {
	tests := []struct {
		name   string
		change func(p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy // nil result: gone from the cache
	}{
		{"deleted from the cache", func(*crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy { return nil }},
		{"being deleted", func(p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			return p
		}},
		{"no address any more", func(p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy {
			p.Status.IP = ""
			return p
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			p := newProxy("a", managed("10.0.0.2", "id-1"))
			h.reader.set(p, newProxy("b"))
			h.round()
			if _, found := h.e.Snapshot(key("a")); !found {
				t.Fatal("no snapshot before the change")
			}
			if q := tt.change(p.DeepCopy()); q != nil {
				h.reader.set(q, newProxy("b"))
			} else {
				h.reader.set(newProxy("b"))
			}
			probed := h.advance(10 * time.Second)
			if d := cmp.Diff([]types.NamespacedName{key("b")}, probed); d != "" {
				t.Errorf("probed (-want +got):\n%s", d)
			}
			if _, found := h.e.Snapshot(key("a")); found {
				t.Error("snapshot survived pruning")
			}
			if d := cmp.Diff([]string{"ns/a"}, h.metrics.forgotten); d != "" {
				t.Errorf("metrics forgotten (-want +got):\n%s", d)
			}
			if got := h.e.Stats().Tracked; got != 1 {
				t.Errorf("tracked %d, want 1", got)
			}
		})
	}
}

// TestReplacedInstanceStartsFresh: a new providerID, UID or address prunes
// the state; the failures counted against the old instance do not carry over.
func TestReplacedInstanceStartsFresh(t *testing.T) {
	tests := []struct {
		name    string
		replace func(p *crawlv1alpha1.Proxy)
		fresh   bool
	}{
		{"new providerID", func(p *crawlv1alpha1.Proxy) { p.Status.ProviderID = "id-2" }, true},
		{"recreated object (new UID)", func(p *crawlv1alpha1.Proxy) { p.UID = "uid-2" }, true},
		{"new address", func(p *crawlv1alpha1.Proxy) { p.Status.IP = "10.0.0.3" }, true},
		{"unrelated change (negative control)", func(p *crawlv1alpha1.Proxy) { p.Labels = map[string]string{"x": "y"} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			k := key("a")
			p := newProxy("a", managed("10.0.0.2", "id-1"))
			h.reader.set(p)
			h.prober.push(k, ok(10), fail(), fail(), fail())
			h.round()
			h.advance(10 * time.Second)
			h.advance(10 * time.Second)
			if n := len(h.events()); n != 1 {
				t.Fatalf("%d events before the replacement, want the first verdict", n)
			}
			tt.replace(p)
			h.reader.set(p)
			h.clk.Step(10 * time.Second)
			probed := h.round()
			if len(probed) != 1 {
				t.Fatalf("probed %v after the change", probed)
			}
			evs := h.events()
			if tt.fresh {
				// Fresh state: the failure is the first of a new run, below
				// failureThreshold; the old verdict's snapshot is gone.
				if len(evs) != 0 {
					t.Errorf("third failure overall flipped the replaced instance")
				}
				if _, found := h.e.Snapshot(k); found {
					t.Error("snapshot about the old instance survived")
				}
				if d := cmp.Diff([]string{"ns/a"}, h.metrics.forgotten); d != "" {
					t.Errorf("metrics forgotten (-want +got):\n%s", d)
				}
			} else if snap, _ := h.e.Snapshot(k); len(evs) != 1 || snap.Healthy {
				t.Errorf("unrelated change reset the counters: %d events, snapshot %+v", len(evs), snap)
			}
		})
	}
}

// TestInFlightResultAfterPruneIsDiscarded: a probe that returns after its
// proxy was pruned neither emits nor recreates metric series.
func TestInFlightResultAfterPruneIsDiscarded(t *testing.T) {
	h := newHarness(t, Options{})
	h.reader.set(newProxy("a"))
	js := h.tick()
	if len(js) != 1 {
		t.Fatalf("%d jobs", len(js))
	}
	h.reader.set()
	h.tick()
	h.run(js)
	if evs := h.events(); len(evs) != 0 {
		t.Errorf("stale result emitted %v", evs)
	}
	if len(h.metrics.observed) != 0 {
		t.Errorf("stale result observed: %v", h.metrics.observed)
	}
	if _, found := h.e.Snapshot(key("a")); found {
		t.Error("stale result published a snapshot")
	}
}

func TestListErrorKeepsState(t *testing.T) {
	h := newHarness(t, Options{})
	h.reader.set(newProxy("a"))
	h.round()
	h.reader.failNext(errors.New("cache unavailable"))
	h.clk.Step(10 * time.Second)
	if got := h.round(); len(got) != 0 {
		t.Errorf("probed %v without a list", got)
	}
	if _, found := h.e.Snapshot(key("a")); !found || len(h.metrics.forgotten) != 0 {
		t.Error("a failed List pruned the fleet")
	}
	if got := h.round(); len(got) != 1 {
		t.Errorf("next tick probed %v, want the due proxy", got)
	}
}

// TestDroppedEventIsRetried: with the channel full the event is dropped, the
// reported markers do not advance (no snapshot either), and the proxy's next
// probe sends it again; a proxy whose event went through does not resend.
func TestDroppedEventIsRetried(t *testing.T) {
	h := newHarness(t, Options{EventBuffer: 1})
	h.reader.set(newProxy("a"), newProxy("b"))
	h.round()
	if d := cmp.Diff([]types.NamespacedName{key("a")}, h.events()); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
	if st := h.e.Stats(); st.EventsDropped != 1 || st.EventsSent != 1 {
		t.Fatalf("stats %+v, want one sent and one dropped", st)
	}
	if _, found := h.e.Snapshot(key("b")); found {
		t.Fatal("dropped event published its snapshot")
	}
	h.advance(10 * time.Second)
	if d := cmp.Diff([]types.NamespacedName{key("b")}, h.events()); d != "" {
		t.Fatalf("retry events (-want +got):\n%s", d)
	}
	if snap, found := h.e.Snapshot(key("b")); !found || !snap.Healthy || !snap.CheckedAt.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("retried snapshot %+v", snap)
	}
	h.advance(10 * time.Second)
	if evs := h.events(); len(evs) != 0 {
		t.Fatalf("delivered verdicts re-sent: %v", evs)
	}
}

// TestSaturatedPool: due proxies that do not fit the queue stay due and go at
// the next tick; in-flight ones are not dispatched twice.
func TestSaturatedPool(t *testing.T) {
	h := newHarness(t, Options{QueueSize: 2})
	names := []string{"a", "b", "c", "d", "e"}
	var ps []*crawlv1alpha1.Proxy
	for _, n := range names {
		ps = append(ps, newProxy(n))
	}
	h.reader.set(ps...)
	var all []job
	seen := map[types.NamespacedName]bool{}
	for i, want := range []int{2, 2, 1, 0} {
		js := h.tick()
		if len(js) != want {
			t.Fatalf("tick %d dispatched %d, want %d", i, len(js), want)
		}
		for _, j := range js {
			if seen[j.target.Key] {
				t.Fatalf("%s dispatched twice while in flight", j.target.Key)
			}
			seen[j.target.Key] = true
		}
		all = append(all, js...)
	}
	if st := h.e.Stats(); st.Saturated != 2 {
		t.Errorf("saturated %d, want 2", st.Saturated)
	}
	h.run(all)
	if st := h.e.Stats(); st.Probes != 5 || st.EventsSent != 5 {
		t.Errorf("stats %+v, want 5 probes and 5 first verdicts", st)
	}
}

func TestInFlightGuard(t *testing.T) {
	h := newHarness(t, Options{})
	h.reader.set(newProxy("a"))
	js := h.tick()
	h.clk.Step(30 * time.Second)
	if got := h.tick(); len(got) != 0 {
		t.Fatalf("dispatched again while in flight: %d jobs", len(got))
	}
	h.run(js)
	if got := h.tick(); len(got) != 1 {
		t.Fatalf("not dispatched once the probe returned: %d jobs", len(got))
	}
}

// TestSchedule: due times advance by whole intervals without drift; a probe
// an interval or more late counts as missed.
func TestSchedule(t *testing.T) {
	h := newHarness(t, Options{})
	h.reader.set(newProxy("a"))
	var at []time.Duration
	for range 36 {
		if len(h.round()) == 1 {
			at = append(at, h.clk.Since(t0))
		}
		h.clk.Step(time.Second)
	}
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second}
	if d := cmp.Diff(want, at); d != "" {
		t.Errorf("probe times (-want +got):\n%s", d)
	}
	if st := h.e.Stats(); st.Missed != 0 {
		t.Errorf("missed %d on schedule", st.Missed)
	}
	h.clk.Step(30 * time.Second) // due at t0+40, now t0+66
	h.round()
	if st := h.e.Stats(); st.Missed != 1 {
		t.Errorf("missed %d, want 1", st.Missed)
	}
	if got := h.advance(10 * time.Second); len(got) != 1 {
		t.Errorf("schedule not restarted from the late probe")
	}
}

func TestMetricsPerProbe(t *testing.T) {
	h := newHarness(t, Options{})
	k := key("a")
	h.reader.set(newProxy("a"))
	h.prober.push(k, ok(12), result{latency: 5 * time.Second, err: ErrTimeout})
	h.round()
	h.advance(10 * time.Second)
	want := []observation{{"ns/a", 12 * time.Millisecond, true}, {"ns/a", 5 * time.Second, false}}
	if d := cmp.Diff(want, h.metrics.observed, cmp.AllowUnexported(observation{})); d != "" {
		t.Errorf("observations (-want +got):\n%s", d)
	}
	if st := h.e.Stats(); st.Probes != 2 || st.Failures != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestTargetCarriesSpec(t *testing.T) {
	h := newHarness(t, Options{})
	p := newProxy("a")
	p.Spec.HealthCheck = crawlv1alpha1.HealthCheck{
		URL: "https://origin.test/", TLS: &crawlv1alpha1.HealthCheckTLS{ServerName: "origin.test"},
	}
	h.reader.set(p)
	h.round()
	want := Target{
		Key: key("a"), ProxyURL: "http://10.0.0.1:3128",
		HealthCheck: crawlv1alpha1.HealthCheck{
			URL: "https://origin.test/", IntervalSeconds: 30, TimeoutSeconds: 5, SuccessThreshold: 1,
			FailureThreshold: 3, ExpectedStatus: 200, TLS: &crawlv1alpha1.HealthCheckTLS{ServerName: "origin.test"},
		},
	}
	if d := cmp.Diff([]Target{want}, h.prober.calls); d != "" {
		t.Errorf("targets (-want +got):\n%s", d)
	}
}

// TestStart runs the real loop on a fake clock: workers probe, events flow,
// cancellation returns, and a second Start is refused.
func TestStart(t *testing.T) {
	h := newHarness(t, Options{Workers: 2})
	h.reader.set(newProxy("a"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.e.Start(ctx) }()
	select {
	case ev := <-h.e.Events():
		if ev.Object.Name != "a" {
			t.Errorf("event for %s", ev.Object.Name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event from the first tick")
	}
	h.prober.push(key("a"), fail(), fail(), fail())
	deadline := time.Now().Add(10 * time.Second)
	for h.prober.callCount() < 4 && time.Now().Before(deadline) {
		h.clk.Step(10 * time.Second)
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case ev := <-h.e.Events():
		if snap, _ := h.e.Snapshot(key("a")); ev.Object.Name != "a" || snap.Healthy {
			t.Errorf("event %s, snapshot %+v, want a unhealthy", ev.Object.Name, snap)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no unhealthy event after %d probes", h.prober.callCount())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after cancel")
	}
	if err := h.e.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
}
