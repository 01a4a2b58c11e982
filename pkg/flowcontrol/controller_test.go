package flowcontrol

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

type waitResult struct {
	o     Outcome
	grant fakeGrant
	err   error
}

func newTestController(f *fakeDispatcher, opts Options) (*Controller[fakeReq, fakeGrant], *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(t0)
	return NewController(f, clk, opts), clk
}

func goWait(c *Controller[fakeReq, fakeGrant], ctx context.Context, req Request[fakeReq]) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		o, g, err := c.EnqueueAndWait(ctx, req)
		ch <- waitResult{o, g, err}
	}()
	return ch
}

// waitFor polls cond for goroutines to reach a state; it bounds the wait so a
// bug fails the test instead of hanging it. It asserts states, not speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func receive(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("EnqueueAndWait did not return")
		return waitResult{}
	}
}

func waiting(c *Controller[fakeReq, fakeGrant], n int) func() bool {
	return func() bool { return c.Stats().Waiting == n }
}

func TestControllerOneTimerDrivesDeadlines(t *testing.T) {
	f := newFake() // no proxies: everyone waits
	c, clk := newTestController(f, Options{})
	const n = 10
	chans := map[int]<-chan waitResult{}
	for i := n; i >= 1; i-- {
		chans[i] = goWait(c, context.Background(), Request[fakeReq]{Flow: "a", Payload: fakeReq{id: i}, Deadline: t0.Add(time.Duration(i) * time.Second)})
		waitFor(t, "queued", waiting(c, n-i+1))
	}
	if w := clk.Waiters(); w != 1 {
		t.Fatalf("clock has %d waiters for %d deadlines, want one timer", w, n)
	}
	for i := 1; i <= n; i++ {
		waitFor(t, "timer armed", clk.HasWaiters)
		clk.Step(time.Second)
		r := receive(t, chans[i])
		if r.o != OutcomeEvictedDeadline || !IsDeadline(r.err) || !IsEvicted(r.err) {
			t.Fatalf("waiter %d: %v %v, want evicted at its deadline", i, r.o, r.err)
		}
		for j := i + 1; j <= n; j++ {
			select {
			case r := <-chans[j]:
				t.Fatalf("waiter %d returned early at %ds: %v", j, i, r.o)
			default:
			}
		}
	}
	waitFor(t, "timer stopped", func() bool { return !clk.HasWaiters() })
	checkAccounting(t, c.Stats())
}

func TestControllerNextChangeGrantsWithoutCapacityEvent(t *testing.T) {
	f := newUniformFake(1)
	c, clk := newTestController(f, Options{})
	f.clock = clk
	if o, _, err := c.EnqueueAndWait(context.Background(), Request[fakeReq]{Flow: "x", Payload: fakeReq{ttl: 3 * time.Second}}); o != OutcomeDispatched {
		t.Fatalf("holder: %v %v", o, err)
	}
	ch := goWait(c, context.Background(), Request[fakeReq]{Flow: "a", Payload: fakeReq{id: 1}})
	waitFor(t, "queued", waiting(c, 1))
	clk.Step(2 * time.Second)
	select {
	case r := <-ch:
		t.Fatalf("granted before the lease expired: %v", r.o)
	case <-time.After(10 * time.Millisecond):
	}
	clk.Step(time.Second)
	r := receive(t, ch)
	if r.o != OutcomeDispatched || r.err != nil || r.grant.req != 1 {
		t.Fatalf("waiter: %v %v %v, want dispatched when the lease expired", r.o, r.grant, r.err)
	}
	f.Release(r.grant)
	if v := f.endedExactlyOnce(); len(v) != 0 {
		t.Errorf("leases: %q", v)
	}
}

func TestControllerReleaseWakesWaiter(t *testing.T) {
	f := newUniformFake(1)
	c, _ := newTestController(f, Options{})
	f.onCapacity = c.OnCapacity // the store's capacity hook
	_, h, _ := c.EnqueueAndWait(context.Background(), Request[fakeReq]{Flow: "x"})
	ch := goWait(c, context.Background(), Request[fakeReq]{Flow: "a", Payload: fakeReq{id: 1}})
	waitFor(t, "queued", waiting(c, 1))
	f.Release(h)
	r := receive(t, ch)
	if r.o != OutcomeDispatched || r.grant.req != 1 {
		t.Fatalf("waiter: %v %v, want dispatched on release", r.o, r.err)
	}
}

// manualCtx is a context whose end the test controls, reporting err.
type manualCtx struct {
	context.Context
	done chan struct{}
	err  error
}

func newManualCtx(err error) *manualCtx {
	return &manualCtx{Context: context.Background(), done: make(chan struct{}), err: err}
}

func (c *manualCtx) Done() <-chan struct{} { return c.done }
func (c *manualCtx) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}
func (c *manualCtx) end() { close(c.done) }

func TestControllerContextEnds(t *testing.T) {
	cases := []struct {
		name    string
		ctxErr  error
		queued  bool
		want    Outcome
		wantIs  []error
		rejects bool
	}{
		{"cancelled while queued", context.Canceled, true, OutcomeEvictedCancelled, []error{ErrEvicted, ErrCancelled, context.Canceled}, false},
		{"context deadline while queued", context.DeadlineExceeded, true, OutcomeEvictedDeadline, []error{ErrEvicted, ErrDeadline, context.DeadlineExceeded}, false},
		{"context already done", context.Canceled, false, OutcomeRejectedOther, []error{ErrRejected, ErrCancelled, context.Canceled}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			c, _ := newTestController(f, Options{})
			ctx := newManualCtx(tc.ctxErr)
			if !tc.queued {
				ctx.end()
			}
			ch := goWait(c, ctx, Request[fakeReq]{Flow: "a"})
			if tc.queued {
				waitFor(t, "queued", waiting(c, 1))
				ctx.end()
			}
			r := receive(t, ch)
			if r.o != tc.want {
				t.Errorf("outcome %v, want %v", r.o, tc.want)
			}
			for _, target := range tc.wantIs {
				if !errors.Is(r.err, target) {
					t.Errorf("error %v does not match %v", r.err, target)
				}
			}
			if IsRejected(r.err) != tc.rejects || IsEvicted(r.err) == tc.rejects {
				t.Errorf("error %v: IsRejected=%v IsEvicted=%v", r.err, IsRejected(r.err), IsEvicted(r.err))
			}
			st := c.Stats()
			checkAccounting(t, st)
			if st.Waiting != 0 {
				t.Errorf("still waiting: %+v", st)
			}
		})
	}
}

func TestControllerShutdown(t *testing.T) {
	f := newFake()
	c, clk := newTestController(f, Options{})
	var chans []<-chan waitResult
	for i := range 3 {
		chans = append(chans, goWait(c, context.Background(), Request[fakeReq]{Flow: "a", Priority: i, Deadline: t0.Add(time.Hour)}))
	}
	waitFor(t, "queued", waiting(c, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// Shutdown waited for every queued EnqueueAndWait to be on its way out.
	if n := c.live.Load(); n != 0 {
		t.Errorf("Shutdown returned with %d waiters still inside EnqueueAndWait", n)
	}
	for _, ch := range chans {
		r := receive(t, ch)
		if r.o != OutcomeEvictedShutdown || !IsShutdown(r.err) || !IsEvicted(r.err) {
			t.Errorf("waiter: %v %v, want evicted by shutdown", r.o, r.err)
		}
	}
	if clk.HasWaiters() {
		t.Error("timer still armed after shutdown")
	}
	o, _, err := c.EnqueueAndWait(context.Background(), Request[fakeReq]{Flow: "a"})
	if o != OutcomeRejectedOther || !IsRejected(err) || !IsShutdown(err) {
		t.Errorf("after shutdown: %v %v, want rejected for shutdown", o, err)
	}
	c.OnCapacity() // harmless
	checkAccounting(t, c.Stats())
}
