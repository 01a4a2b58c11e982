package checkpoint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// journalRun drives a real store through random changes (grants, releases,
// renewals, reports, proxies changing and leaving, time passing, leases
// expiring) and
// writes the checkpoint as the writer does: a snapshot, then a journal of
// diffs, each through the wire format, with a new snapshot now and then.
// After every write it compares what a load would restore (the snapshot
// with the journal replayed) with the store's state, and returns the first
// difference. mutate (nil: none) changes each delta before it is written:
// the negative control.
func journalRun(t *testing.T, seed uint64, steps int, mutate func(*delta)) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	clk := clocktesting.NewFakeClock(t0)
	s, err := lease.New(lease.Options{MaxLeasesPerProxy: 3, MaxTTL: time.Hour, CooldownWindow: 2 * time.Minute}, clk)
	if err != nil {
		t.Fatal(err)
	}
	proxy := func(i, latency int) lease.ProxyInfo {
		return lease.ProxyInfo{Namespace: "crawl", Name: fmt.Sprintf("p%d", i), URL: "http://10.0.0.1:3128", Healthy: true, LatencyMillis: int64(latency)}
	}
	for i := range 8 {
		s.UpsertProxy(proxy(i, 1))
	}
	var (
		enc      encoder
		b        baseline
		st       lease.State
		snapshot []byte
		segments [][]byte
	)
	takeSnapshot := func() {
		s.StateInto(&st)
		data, err := enc.encode(&st, 1, stringCodec{})
		if err != nil {
			t.Fatal(err)
		}
		snapshot, segments = bytes.Clone(data), nil
		b.reset(&st)
	}
	takeSnapshot()
	for step := range steps {
		for range 1 + rng.IntN(6) {
			live := s.List("")
			switch op := rng.IntN(10); {
			case op < 3:
				req := lease.AcquireRequest{Namespace: "crawl", Target: fmt.Sprintf("site-%d", rng.IntN(4)), TTL: time.Duration(1+rng.IntN(5)) * time.Minute, Holder: "h"}
				if rng.IntN(3) == 0 {
					req.Meta = lease.Metadata{Labels: map[string]string{"step": fmt.Sprint(step)}, Extra: "template"}
				}
				_, _ = s.Acquire(req)
			case op < 5 && len(live) > 0:
				s.Release(live[rng.IntN(len(live))].ID)
			case op < 6 && len(live) > 0:
				_, _ = s.Renew(live[rng.IntN(len(live))].ID, time.Duration(1+rng.IntN(5))*time.Minute)
			case op < 8 && len(live) > 0:
				_ = s.Report(live[rng.IntN(len(live))].ID, []string{lease.ResultRateLimited, lease.ResultOK}[rng.IntN(2)], fmt.Sprintf("site-%d", rng.IntN(4)))
			case op < 9 && rng.IntN(4) == 0:
				// Its leases end, its cooldowns go with it.
				s.RemoveProxy(proxy(rng.IntN(8), 0).Key())
			case op < 9:
				s.UpsertProxy(proxy(rng.IntN(8), rng.IntN(3)))
			default:
				clk.Step(time.Duration(rng.IntN(90)) * time.Second)
			}
		}
		if rng.IntN(25) == 0 {
			takeSnapshot()
			continue
		}
		s.StateInto(&st)
		var d delta
		b.diff(&st, clk.Now(), &d)
		if b.empty(&d) {
			continue
		}
		if mutate != nil {
			mutate(&d)
		}
		data, err := enc.encodeDelta(&d, 1, stringCodec{})
		if err != nil {
			t.Fatal(err)
		}
		segments = append(segments, bytes.Clone(data))
		b.apply(&d)

		restored, _, err := decode(snapshot, stringCodec{})
		if err != nil {
			t.Fatal(err)
		}
		var deltas []delta
		for _, seg := range segments {
			d, err := decodeDelta(seg, stringCodec{})
			if err != nil {
				t.Fatal(err)
			}
			deltas = append(deltas, d)
		}
		replay(&restored, deltas)
		if diff := cmp.Diff(asLoaded(st, clk.Now()), asLoaded(restored, clk.Now())); diff != "" {
			return fmt.Sprintf("step %d, %d segments after the snapshot (-store +restored):\n%s", step, len(segments), diff)
		}
	}
	return ""
}

// asLoaded is st as a load at now restores it: in a fixed order, without
// the cooldowns and ended leases over by then.
func asLoaded(st lease.State, now time.Time) lease.State {
	out := lease.State{Revision: st.Revision, TakenAt: st.TakenAt}
	out.Leases = append(out.Leases, st.Leases...)
	slices.SortFunc(out.Leases, func(a, b lease.Lease) int { return strings.Compare(a.ID, b.ID) })
	for _, c := range st.Cooldowns {
		if c.Until.After(now) {
			out.Cooldowns = append(out.Cooldowns, c)
		}
	}
	slices.SortFunc(out.Cooldowns, func(a, b lease.Cooldown) int {
		return strings.Compare(a.Proxy.String()+" "+a.Target, b.Proxy.String()+" "+b.Target)
	})
	for _, e := range st.Ended {
		if e.Until.After(now) {
			out.Ended = append(out.Ended, e)
		}
	}
	slices.SortFunc(out.Ended, func(a, b lease.EndedLease) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// A snapshot and the journal of diffs after it restore the store's state,
// through every kind of change, over many seeds.
func TestJournalRestoresTheStoreState(t *testing.T) {
	for seed := range uint64(20) {
		if d := journalRun(t, seed, 400, nil); d != "" {
			t.Fatalf("seed %d: %s", seed, d)
		}
	}
}

// Negative controls: a journal that loses one kind of change is caught.
func TestJournalCheckCatchesALostChange(t *testing.T) {
	for name, mutate := range map[string]func(*delta){
		"deleted leases dropped": func(d *delta) { d.deletedLeases = nil },
		"changed leases dropped": func(d *delta) { d.puts.Leases = keep(d.puts.Leases, func(int, lease.Lease) bool { return false }) },
		"cooldowns dropped":      func(d *delta) { d.puts.Cooldowns = nil },
		"ended leases dropped":   func(d *delta) { d.puts.Ended = nil },
		"revision not written":   func(d *delta) { d.puts.Revision = 0 },
	} {
		caught := false
		for seed := range uint64(20) {
			if journalRun(t, seed, 400, mutate) != "" {
				caught = true
				break
			}
		}
		if !caught {
			t.Errorf("%s: not caught in 20 runs", name)
		}
	}
}

// The store keeps a cooldown until it ends, so the run above never drops
// one early; should it, the journal says so, and one over by then is
// dropped without a word.
func TestJournalDeletesACooldownGoneEarly(t *testing.T) {
	key := lease.ProxyKey{Namespace: "crawl", Name: "p1"}
	before := lease.State{Revision: 1, Cooldowns: []lease.Cooldown{{Proxy: key, Target: "early", Until: t0.Add(time.Hour)}, {Proxy: key, Target: "over", Until: t0.Add(time.Minute)}}}
	var b baseline
	b.reset(&before)
	var d delta
	b.diff(&lease.State{Revision: 2}, t0.Add(2*time.Minute), &d)
	if want := []cooldownKey{{key, "early"}}; !slices.Equal(d.deletedCooldowns, want) {
		t.Fatalf("deleted cooldowns %v, want %v", d.deletedCooldowns, want)
	}
	st := before
	st.Cooldowns = slices.Clone(before.Cooldowns)
	replay(&st, []delta{d})
	if len(st.Cooldowns) != 1 || st.Cooldowns[0].Target != "over" || st.Revision != 2 {
		t.Errorf("replayed: %+v; want only the cooldown over by now (a load drops it), revision 2", st)
	}
}

// A journal segment is one JSON object of the document's fields, its
// deletions included.
func TestStreamedSegmentIsTheDocument(t *testing.T) {
	st := sampleState()
	key := lease.ProxyKey{Namespace: "crawl", Name: "p1"}
	d := delta{puts: st, deletedLeases: []string{"x", "y"}, deletedCooldowns: []cooldownKey{{key, "site"}, {key, ""}}, deletedEnded: []string{"z"}}
	data, err := (&encoder{}).encodeDelta(&d, 777, stringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	doc := strictDocument(t, data)
	want := []storedCooldownKey{{Namespace: "crawl", Proxy: "p1", Target: "site"}, {Namespace: "crawl", Proxy: "p1"}}
	if !doc.Journal || !slices.Equal(doc.DeletedLeases, []string{"x", "y"}) || !slices.Equal(doc.DeletedEnded, []string{"z"}) || !slices.Equal(doc.DeletedCooldowns, want) || len(doc.Leases) != 2 {
		t.Errorf("segment: journal %v, deleted %v %v %v, %d leases", doc.Journal, doc.DeletedLeases, doc.DeletedCooldowns, doc.DeletedEnded, len(doc.Leases))
	}
	got, err := decodeDelta(data, stringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, got, cmp.AllowUnexported(delta{}, cooldownKey{})); diff != "" {
		t.Errorf("segment round trip (-want +got):\n%s", diff)
	}
	// A segment where the snapshot belongs, and the reverse, are refused.
	if _, _, err := decode(data, stringCodec{}); !IsCorrupt(err) {
		t.Errorf("a segment read as the snapshot: %v", err)
	}
	snap, err := (&encoder{}).encode(&st, 777, stringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeDelta(snap, stringCodec{}); !IsCorrupt(err) {
		t.Errorf("the snapshot read as a segment: %v", err)
	}
}
