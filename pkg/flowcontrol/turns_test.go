package flowcontrol

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// oneProxyTurns drives crawlers over ONE exclusive proxy through a Core: each
// worker of flows (one entry per worker, in arrival order) requests, holds
// for a second of the fake clock, releases and requests again at once — after
// the round its release triggered, as over the HTTP API, where the next
// request only leaves once the release has been answered. It returns the
// flows' first letters in grant order, n grants in all.
func oneProxyTurns(t *testing.T, p policyKind, flows []string, n int) string {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(t0)
	f := newFake("any")
	c := NewCore(f, clk, Options{})
	c.setPolicy(p)
	// The lease store's capacity hook: a release dispatches at once.
	f.onCapacity = c.OnCapacity

	type worker struct {
		ticket *Ticket[fakeReq, fakeGrant]
		grant  fakeGrant
		hold   bool
	}
	workers := make([]worker, len(flows))
	var seq strings.Builder
	granted := func(i int, g fakeGrant) {
		workers[i].ticket, workers[i].grant, workers[i].hold = nil, g, true
		seq.WriteByte(flows[i][0])
	}
	request := func(i int) {
		o, g, tk, err := c.Enqueue(Request[fakeReq]{Flow: flows[i], Payload: fakeReq{id: i}})
		switch o {
		case OutcomeDispatched:
			granted(i, g)
		case OutcomePending:
			workers[i].ticket = tk
		default:
			t.Fatalf("worker %d: %v %v", i, o, err)
		}
	}
	// settle collects the grant a round made to a waiting worker.
	settle := func() {
		for i := range workers {
			if tk := workers[i].ticket; tk != nil {
				if g, ok := tk.Grant(); ok {
					granted(i, g)
				}
			}
		}
	}
	for i := range flows {
		request(i)
	}
	for seq.Len() < n {
		holder := -1
		for i, w := range workers {
			if w.hold {
				holder = i
			}
		}
		if holder < 0 {
			t.Fatalf("nobody holds the proxy after %q", seq.String())
		}
		clk.SetTime(clk.Now().Add(time.Second))
		workers[holder].hold = false
		f.Release(workers[holder].grant) // fires OnCapacity: the round runs here
		settle()
		request(holder)
	}
	if v := f.endedExactlyOnce(); len(v) != 1 { // the last holder's lease is live
		t.Errorf("lease accounting: %q", v)
	}
	checkAccounting(t, c.Stats())
	return seq.String()[:n]
}

// TestTiedFlowsTakeTurnsOnOneProxy: with one exclusive proxy every release
// finds both flows holding nothing, so the tie-break alone decides, and a
// flow with two workers (two requests outstanding) must not take two turns
// per turn of a flow with one. The one-worker flow's next request arrives
// only after its release was dispatched: it must not lose its place for
// having been idle that instant, and a grant made at once on an idle proxy
// (the fast path) is a turn like any other.
func TestTiedFlowsTakeTurnsOnOneProxy(t *testing.T) {
	cases := []struct {
		name   string
		policy policyKind
		flows  []string // one entry per worker, in arrival order
		want   string
	}{
		{
			name:   "greedy arrives first and takes the idle proxy",
			policy: policyFair,
			flows:  []string{"greedy", "greedy", "polite"},
			want:   "gpgpgpgpgpgpgpgpgpgp",
		},
		{
			name:   "polite arrives first and takes the idle proxy",
			policy: policyFair,
			flows:  []string{"polite", "greedy", "greedy"},
			want:   "pgpgpgpgpgpgpgpgpgpg",
		},
		{
			name:   "greedy's workers on both sides of polite",
			policy: policyFair,
			flows:  []string{"greedy", "polite", "greedy"},
			want:   "gpgpgpgpgpgpgpgpgpgp",
		},
		{
			name:   "three flows of one, two and three workers",
			policy: policyFair,
			flows:  []string{"xtriple", "ysingle", "zdouble", "xtriple", "zdouble", "xtriple"},
			want:   "xyzxyzxyzxyzxyzxyzxy",
		},
		// Negative controls: the policy before turns were remembered (a
		// flow that starts waiting joins the back; an immediate grant is no
		// turn) gives the two-worker flow two turns per turn of the other,
		// as the fairness e2e saw over HTTP.
		{
			name:   "forgetful round-robin, greedy first",
			policy: policyFairForgetful,
			flows:  []string{"greedy", "greedy", "polite"},
			want:   "ggpggpggpggpggpggpgg",
		},
		{
			name:   "forgetful round-robin, polite first",
			policy: policyFairForgetful,
			flows:  []string{"polite", "greedy", "greedy"},
			want:   "pggpggpggpggpggpggpg",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := oneProxyTurns(t, tc.policy, tc.flows, len(tc.want))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("holders in grant order (-want +got):\n%s", d)
			}
		})
	}
}

// TestTurnMemoryIsBounded: the memory keeps a flow's turn for at least limit
// writes of other flows, never holds more than two generations, and keeps
// the later of two turns written for one flow.
func TestTurnMemoryIsBounded(t *testing.T) {
	const limit = 4
	m := newTurnMemory(limit)
	name := func(i int) string { return string(rune('a' + i)) }
	m.put("x", 100)
	for i := range limit {
		m.put(name(i), uint64(i))
	}
	if got, ok := m.get("x"); !ok || got != 100 {
		t.Errorf("x after %d other writes: %d %v, want 100 true", limit, got, ok)
	}
	for i := range 3 * limit {
		m.put(name(i), uint64(i))
		if m.len() > 2*limit {
			t.Fatalf("after %d writes the memory holds %d flows, want at most %d", i+1, m.len(), 2*limit)
		}
	}
	// Negative control: after two generations of other flows x is gone.
	if got, ok := m.get("x"); ok {
		t.Errorf("x after %d other writes: still remembered (%d)", 4*limit, got)
	}
	// The later turn wins, whichever order the writes come in, also across
	// a rotation.
	m.put("y", 50)
	m.put("y", 40)
	for i := range limit {
		m.put(name(20+i), 1)
	}
	m.put("y", 45)
	if got, _ := m.get("y"); got != 50 {
		t.Errorf("y = %d, want the later turn 50", got)
	}
}

// A flow the core has forgotten comes back as if never served: ahead of the
// flows served since, not behind them, so forgetting never costs a flow its
// turn.
func TestForgottenFlowGoesFirst(t *testing.T) {
	f := newFake("any")
	c := NewCore(f, clocktesting.NewFakePassiveClock(t0), Options{})
	f.onCapacity = c.OnCapacity
	c.idle.limit = 2
	// "old" is served at once (a turn), then two other flows' turns fill
	// both generations of the memory and "old" is forgotten.
	_, g, _, _ := c.Enqueue(Request[fakeReq]{Flow: "old", Payload: fakeReq{id: 1}})
	for i, flow := range []string{"p", "q", "r", "s", "t"} {
		f.Release(g)
		_, g, _, _ = c.Enqueue(Request[fakeReq]{Flow: flow, Payload: fakeReq{id: 2 + i}})
	}
	if _, ok := c.idle.get("old"); ok {
		t.Fatal("old is still remembered; the test proves nothing")
	}
	// "t" holds the proxy; "s" (served before) and "old" wait.
	_, _, s, _ := c.Enqueue(Request[fakeReq]{Flow: "s", Payload: fakeReq{id: 10}})
	_, _, old, _ := c.Enqueue(Request[fakeReq]{Flow: "old", Payload: fakeReq{id: 11}})
	f.Release(g)
	if old.Outcome() != OutcomeDispatched || s.Outcome() != OutcomePending {
		t.Errorf("old %v, s %v: want the forgotten flow served first", old.Outcome(), s.Outcome())
	}
}
