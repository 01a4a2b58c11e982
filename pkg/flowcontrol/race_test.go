package flowcontrol

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// These tests force the interleavings of a grant with a caller leaving,
// using pause points, and check that no grant leaks and none is released
// twice. Run them under -race.

// raceSetup returns a controller over one proxy, held by an outsider whose
// grant is returned.
func raceSetup(t *testing.T) (*fakeDispatcher, *Controller[fakeReq, fakeGrant], fakeGrant) {
	t.Helper()
	f := newUniformFake(1)
	c, _ := newTestController(f, Options{})
	o, h, err := c.EnqueueAndWait(context.Background(), Request[fakeReq]{Flow: "outsider"})
	if o != OutcomeDispatched {
		t.Fatalf("outsider: %v %v", o, err)
	}
	return f, c, h
}

func checkNoLeak(t *testing.T, f *fakeDispatcher, c *Controller[fakeReq, fakeGrant], wantStats Stats) {
	t.Helper()
	if v := f.endedExactlyOnce(); len(v) != 0 {
		t.Errorf("leases did not end exactly once: %q", v)
	}
	if !f.freeMatching(fakeReq{}) {
		t.Error("the proxy is not free: a grant leaked")
	}
	st := c.Stats()
	checkAccounting(t, st)
	st.Rounds = 0
	if d := cmp.Diff(wantStats, st); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}
}

func TestRaceGrantVersusLeave(t *testing.T) {
	cases := []struct {
		name   string
		ctxErr error
		want   Outcome
	}{
		{"cancel", context.Canceled, OutcomeEvictedCancelled},
		{"context deadline", context.DeadlineExceeded, OutcomeEvictedDeadline},
	}
	for _, tc := range cases {
		// The dispatcher granted, but the caller's CAS lands before the
		// round's: the round must give the grant back.
		t.Run(tc.name+": caller wins the CAS", func(t *testing.T) {
			f, c, h := raceSetup(t)
			reached := make(chan *Ticket[fakeReq, fakeGrant])
			proceed := make(chan struct{})
			pausesFor(c.core).afterGrant = func(tk *Ticket[fakeReq, fakeGrant]) {
				reached <- tk
				<-proceed
			}
			ctx := newManualCtx(tc.ctxErr)
			ch := goWait(c, ctx, Request[fakeReq]{Flow: "a", Payload: fakeReq{id: 1}})
			waitFor(t, "queued", waiting(c, 1))
			releaser := make(chan struct{})
			go func() {
				defer close(releaser)
				f.Release(h)
				c.OnCapacity() // pauses after the grant verdict, mutex held
			}()
			tk := <-reached
			ctx.end()
			waitFor(t, "caller's CAS", func() bool { return tk.Outcome() == tc.want })
			close(proceed)
			r := receive(t, ch)
			<-releaser
			if r.o != tc.want || !IsEvicted(r.err) {
				t.Errorf("caller: %v %v, want %v", r.o, r.err, tc.want)
			}
			if _, ok := tk.Grant(); ok {
				t.Error("ticket exposes a grant it never got")
			}
			checkNoLeak(t, f, c, Stats{Enqueued: 2, Dispatched: 1, Evicted: 1, Abandoned: 1})
		})
		// The round's CAS lands first: the caller, finding its ticket
		// granted, must give the grant back itself.
		t.Run(tc.name+": grant wins the CAS", func(t *testing.T) {
			f, c, h := raceSetup(t)
			reached := make(chan *Ticket[fakeReq, fakeGrant])
			proceed := make(chan struct{})
			pausesFor(c.core).beforeCancel = func(tk *Ticket[fakeReq, fakeGrant]) {
				reached <- tk
				<-proceed
			}
			ctx := newManualCtx(tc.ctxErr)
			ch := goWait(c, ctx, Request[fakeReq]{Flow: "a", Payload: fakeReq{id: 1}})
			waitFor(t, "queued", waiting(c, 1))
			ctx.end()
			tk := <-reached
			f.Release(h)
			c.OnCapacity()
			if o := tk.Outcome(); o != OutcomeDispatched {
				t.Fatalf("ticket %v after the round, want dispatched", o)
			}
			close(proceed)
			r := receive(t, ch)
			if r.o != tc.want || !IsEvicted(r.err) {
				t.Errorf("caller: %v %v, want %v", r.o, r.err, tc.want)
			}
			if o := tk.Outcome(); o != tc.want {
				t.Errorf("ticket after give-back: %v, want %v", o, tc.want)
			}
			// A second Cancel must not release again.
			c.core.pauses = nil
			if o := c.core.Cancel(tk, OutcomeEvictedCancelled); o != tc.want {
				t.Errorf("second Cancel: %v, want %v", o, tc.want)
			}
			checkNoLeak(t, f, c, Stats{Enqueued: 2, Dispatched: 2, Abandoned: 1})
		})
	}
}

// The request's own deadline (on the core's clock) falls due at the moment
// capacity appears; the timer goroutine is paused before it takes the mutex.
// The capacity event must evict the expired request, not grant it.
func TestRaceGrantVersusDeadlineTimer(t *testing.T) {
	f, c, h := raceSetup(t)
	clk := c.clock.(interface{ Step(time.Duration) })
	reached := make(chan struct{})
	proceed := make(chan struct{})
	pausesFor(c.core).beforeTimer = func() {
		reached <- struct{}{}
		<-proceed
	}
	ch := goWait(c, context.Background(), Request[fakeReq]{Flow: "a", Payload: fakeReq{id: 1}, Deadline: t0.Add(5 * time.Second)})
	waitFor(t, "queued", waiting(c, 1))
	clk.Step(5 * time.Second)
	<-reached
	f.Release(h)
	c.OnCapacity()
	r := receive(t, ch)
	if r.o != OutcomeEvictedDeadline || !IsDeadline(r.err) {
		t.Errorf("caller: %v %v, want evicted at its deadline", r.o, r.err)
	}
	close(proceed)
	if n := len(f.grants()); n != 1 {
		t.Errorf("%d grants, want only the outsider's", n)
	}
	checkNoLeak(t, f, c, Stats{Enqueued: 2, Dispatched: 1, Evicted: 1})
}

// One nanosecond before the deadline the grant wins, and the timer that
// fires afterwards finds nothing to evict.
func TestRaceGrantJustBeforeDeadline(t *testing.T) {
	f, c, h := raceSetup(t)
	clk := c.clock.(interface {
		Step(time.Duration)
		HasWaiters() bool
	})
	ch := goWait(c, context.Background(), Request[fakeReq]{Flow: "a", Payload: fakeReq{id: 1}, Deadline: t0.Add(5 * time.Second)})
	waitFor(t, "queued", waiting(c, 1))
	clk.Step(5*time.Second - time.Nanosecond)
	f.Release(h)
	c.OnCapacity()
	r := receive(t, ch)
	if r.o != OutcomeDispatched {
		t.Fatalf("caller: %v %v, want dispatched", r.o, r.err)
	}
	if clk.HasWaiters() {
		t.Error("timer still armed with nothing waiting")
	}
	clk.Step(time.Second)
	f.Release(r.grant)
	checkNoLeak(t, f, c, Stats{Enqueued: 2, Dispatched: 2})
}

// Many callers with random cancellation race grants and releases through
// the real goroutine path; every lease must end exactly once.
func TestRaceStress(t *testing.T) {
	f := newUniformFake(3)
	c, _ := newTestController(f, Options{MaxQueuedPerFlow: 8})
	f.onCapacity = c.OnCapacity
	const workers, rounds = 8, 150
	var wg sync.WaitGroup
	var mu sync.Mutex
	userReleases := 0
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			flow := []string{"a", "b", "c"}[w%3]
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Microsecond)
				o, g, _ := c.EnqueueAndWait(ctx, Request[fakeReq]{Flow: flow, Priority: w % 2})
				cancel()
				if o == OutcomeDispatched {
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
					f.Release(g)
					mu.Lock()
					userReleases++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	st := c.Stats()
	checkAccounting(t, st)
	if st.Waiting != 0 {
		t.Errorf("still waiting: %+v", st)
	}
	if v := f.endedExactlyOnce(); len(v) != 0 {
		t.Errorf("leases did not end exactly once: %q", v)
	}
	calls := f.callCounts()
	if got, want := calls.Release, userReleases+int(st.Abandoned); got != want {
		t.Errorf("%d releases, want %d by callers + %d abandoned", got, userReleases, st.Abandoned)
	}
	t.Logf("%+v", st)
}
