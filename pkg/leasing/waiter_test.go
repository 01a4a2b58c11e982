package leasing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// waiterEnv is a real lease store with one healthy proxy, on a fake clock,
// behind the wait queue as Run wires it.
type waiterEnv struct {
	clk   *clocktesting.FakeClock
	store *lease.Store
	ctl   *LeaseController
	w     *Waiter
}

func newWaiterEnv(t *testing.T, opts flowcontrol.Options) *waiterEnv {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := lease.New(lease.Options{MaxTTL: time.Hour, CooldownWindow: time.Minute}, clk)
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "p1", URL: "http://127.0.0.2:3128", Host: "127.0.0.2", Port: 3128, Healthy: true})
	ctl := NewLeaseController(store, clk, opts)
	stop := store.OnCapacity(ctl.OnCapacity)
	t.Cleanup(func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ctl.Shutdown(ctx)
	})
	return &waiterEnv{clk: clk, store: store, ctl: ctl, w: NewWaiter(ctl, store)}
}

// hold takes the only proxy directly, as a request without a wait would.
func (e *waiterEnv) hold(t *testing.T) *lease.Lease {
	t.Helper()
	l, err := e.store.Acquire(lease.AcquireRequest{Namespace: "ns", Holder: "http:a", Flow: "http:a"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type waitResult struct {
	l   *lease.Lease
	err error
}

// wait is the Waiter's Wait.
func (e *waiterEnv) wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error) {
	return e.w.Wait(ctx, req, priority, deadline)
}

func (e *waiterEnv) waitAsync(ctx context.Context, req lease.AcquireRequest, deadline time.Time) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		l, err := e.wait(ctx, req, 0, deadline)
		ch <- waitResult{l, err}
	}()
	return ch
}

func anyRequest(lease.AcquireRequest) bool { return true }

// waitQueued blocks until n requests wait in the queue.
func (e *waiterEnv) waitQueued(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.ctl.Waiting(anyRequest) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests waiting, want %d", e.ctl.Waiting(anyRequest), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func receive(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return")
		return waitResult{}
	}
}

func TestLeaseWaiterGrantsOnRelease(t *testing.T) {
	e := newWaiterEnv(t, flowcontrol.Options{MaxQueuedPerFlow: 4, MaxQueuedPerBand: 4, MaxQueued: 4})
	held := e.hold(t)
	ch := e.waitAsync(context.Background(), lease.AcquireRequest{Namespace: "ns", Holder: "http:b", Flow: "http:b", Target: "example.org"},
		e.clk.Now().Add(time.Minute))
	e.waitQueued(t, 1)
	if got := e.store.HeldBy("http:b"); got != 0 {
		t.Fatalf("HeldBy(http:b) = %d while waiting, want 0", got)
	}

	e.store.Release(held.ID) // the store's capacity hook wakes the queue
	r := receive(t, ch)
	if r.err != nil {
		t.Fatalf("Wait: %v", r.err)
	}
	got := struct{ Proxy, Holder, Flow, Target string }{r.l.Proxy.Name, r.l.Holder, r.l.Flow, r.l.Target}
	want := struct{ Proxy, Holder, Flow, Target string }{"p1", "http:b", "http:b", "example.org"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("granted lease (-want +got):\n%s", d)
	}
	if n := e.store.HeldBy("http:b"); n != 1 {
		t.Errorf("HeldBy(http:b) = %d, want 1: the grant must count towards the waiting flow", n)
	}
}

// Every way a wait can fail, as the APIs' Waiter contracts name it.
func TestLeaseWaiterErrors(t *testing.T) {
	type verdict struct {
		NoMatch, RetryAfter, Canceled, TTLTooLong, ShuttingDown bool
		AtCapacity                                              int
	}
	classify := func(err error) verdict {
		e := AsError(err)
		return verdict{
			NoMatch:      e.Reason == ReasonNoMatch,
			RetryAfter:   e.Reason == ReasonQueueFull && e.RetryAfter > 0,
			Canceled:     e.Reason == ReasonCancelled && errors.Is(err, context.Canceled),
			TTLTooLong:   e.Reason == ReasonInvalid && e.MaxTTL > 0,
			ShuttingDown: e.Reason == ReasonShuttingDown,
			AtCapacity:   e.Counts.AtCapacity,
		}
	}
	tests := []struct {
		name string
		// run provokes the failure and returns Wait's error.
		run  func(t *testing.T, e *waiterEnv) error
		want verdict
	}{
		{
			name: "deadline passes: no match with the counts of that moment",
			run: func(t *testing.T, e *waiterEnv) error {
				e.hold(t)
				ch := e.waitAsync(context.Background(), lease.AcquireRequest{Namespace: "ns", Flow: "http:b"}, e.clk.Now().Add(5*time.Second))
				e.waitQueued(t, 1)
				e.clk.Step(5 * time.Second)
				return receive(t, ch).err
			},
			want: verdict{NoMatch: true, AtCapacity: 1},
		},
		{
			name: "queue full: rejected at once with a retry hint",
			run: func(t *testing.T, e *waiterEnv) error {
				e.hold(t)
				e.waitAsync(context.Background(), lease.AcquireRequest{Namespace: "ns", Flow: "http:b"}, e.clk.Now().Add(time.Minute))
				e.waitQueued(t, 1)
				_, err := e.wait(context.Background(), lease.AcquireRequest{Namespace: "ns", Flow: "http:b"}, 0, e.clk.Now().Add(time.Minute))
				return err
			},
			want: verdict{RetryAfter: true},
		},
		{
			name: "caller leaves: its context error, and no lease left behind",
			run: func(t *testing.T, e *waiterEnv) error {
				held := e.hold(t)
				ctx, cancel := context.WithCancel(context.Background())
				ch := e.waitAsync(ctx, lease.AcquireRequest{Namespace: "ns", Flow: "http:b"}, e.clk.Now().Add(time.Minute))
				e.waitQueued(t, 1)
				cancel()
				err := receive(t, ch).err
				e.store.Release(held.ID)
				if n := e.store.Active(); n != 0 {
					t.Errorf("%d leases live after the only holder released and the waiter left, want 0", n)
				}
				return err
			},
			want: verdict{Canceled: true},
		},
		{
			name: "the store refuses the request: its own error, not a 429",
			run: func(t *testing.T, e *waiterEnv) error {
				_, err := e.wait(context.Background(), lease.AcquireRequest{Namespace: "ns", Flow: "http:b", TTL: 2 * time.Hour}, 0, e.clk.Now().Add(time.Minute))
				return err
			},
			want: verdict{TTLTooLong: true},
		},
		{
			name: "shutdown: a 503-class error, not a 429",
			run: func(t *testing.T, e *waiterEnv) error {
				e.hold(t)
				ch := e.waitAsync(context.Background(), lease.AcquireRequest{Namespace: "ns", Flow: "http:b"}, e.clk.Now().Add(time.Minute))
				e.waitQueued(t, 1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := e.ctl.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				return receive(t, ch).err
			},
			want: verdict{ShuttingDown: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newWaiterEnv(t, flowcontrol.Options{MaxQueuedPerFlow: 1, MaxQueuedPerBand: 8, MaxQueued: 8})
			err := tt.run(t, e)
			if err == nil {
				t.Fatal("Wait succeeded, want an error")
			}
			if d := cmp.Diff(tt.want, classify(err)); d != "" {
				t.Errorf("error %q classified (-want +got):\n%s", err, d)
			}
		})
	}
}

// A request without a wait (a deadline of now) is granted at once when a
// proxy is free, answered no match at once when none is, and never queued:
// not even a full queue makes it a 429.
func TestLeaseWaiterWithoutAWait(t *testing.T) {
	e := newWaiterEnv(t, flowcontrol.Options{MaxQueuedPerFlow: 1, MaxQueuedPerBand: 1, MaxQueued: 1})
	now := e.clk.Now()
	l, err := e.wait(context.Background(), lease.AcquireRequest{Namespace: "ns", Holder: "http:a", Flow: "http:a"}, 0, now)
	if err != nil {
		t.Fatalf("Wait without a wait on a free proxy: %v", err)
	}
	// The proxy is taken; one request waits, which fills the queue.
	ch := e.waitAsync(context.Background(), lease.AcquireRequest{Namespace: "ns", Holder: "http:b", Flow: "http:b"}, now.Add(time.Minute))
	e.waitQueued(t, 1)

	_, err = e.wait(context.Background(), lease.AcquireRequest{Namespace: "ns", Holder: "http:c", Flow: "http:c"}, 0, now)
	if e := AsError(err); e.Reason != ReasonNoMatch || e.Counts.AtCapacity != 1 {
		t.Errorf("Wait without a wait, proxy taken, queue full = %v; want no match with the counts, not queue full", err)
	}
	if n := e.ctl.Waiting(anyRequest); n != 1 {
		t.Errorf("%d requests waiting, want 1: a request without a wait must not queue", n)
	}
	// The waiter, not a later request without a wait, gets the release.
	e.store.Release(l.ID)
	if r := receive(t, ch); r.err != nil || r.l.Holder != "http:b" {
		t.Fatalf("the waiter after the release: %+v, %v", r.l, r.err)
	}
}

// With HeldChangeNotifications a round trusts the held counts it was told
// about, so every change of them must be reported. A holds two leases and B
// one (granted after A's, so A was served less recently); both wait; A
// releases one. A and B then hold one each, and the tie goes to A, served
// less recently. A queue told nothing of the release still counts A at two
// and grants B: the negative control shows the check sees the difference.
func TestHeldChangesReachTheQueue(t *testing.T) {
	for _, tt := range []struct {
		name   string
		report bool
		want   string
	}{
		{"reported", true, "http:a"},
		{"not reported (broken wiring)", false, "http:b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			store, err := lease.New(lease.Options{MaxTTL: time.Hour}, clk)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				host := fmt.Sprintf("127.0.0.%d", i+2)
				store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: fmt.Sprintf("p%d", i), URL: "http://" + host + ":3128", Host: host, Port: 3128, Healthy: true})
			}
			ctl := NewLeaseController(store, clk, flowcontrol.Options{HeldChangeNotifications: true})
			stop := store.OnCapacity(ctl.OnCapacity)
			t.Cleanup(stop)
			if tt.report {
				t.Cleanup(ReportHeldChanges(store, ctl))
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = ctl.Shutdown(ctx)
			})
			w := NewWaiter(ctl, store)
			now := clk.Now()
			req := func(flow string) lease.AcquireRequest {
				return lease.AcquireRequest{Namespace: "ns", Holder: flow, Flow: flow}
			}
			a1, err := w.Wait(context.Background(), req("http:a"), 0, now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Wait(context.Background(), req("http:a"), 0, now); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Wait(context.Background(), req("http:b"), 0, now); err != nil {
				t.Fatal(err)
			}
			type result struct {
				l   *lease.Lease
				err error
			}
			got := make(chan result, 2)
			for _, flow := range []string{"http:a", "http:b"} {
				go func() {
					l, err := w.Wait(context.Background(), req(flow), 0, now.Add(time.Minute))
					got <- result{l, err}
				}()
				deadline := time.Now().Add(5 * time.Second)
				for ctl.Waiting(anyRequest) != map[string]int{"http:a": 1, "http:b": 2}[flow] {
					if time.Now().After(deadline) {
						t.Fatal("requests did not queue")
					}
					time.Sleep(time.Millisecond)
				}
			}
			store.Release(a1.ID)
			select {
			case r := <-got:
				if r.err != nil || r.l.Flow != tt.want {
					t.Errorf("the freed proxy went to %+v (%v), want flow %s", r.l, r.err, tt.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no waiter was granted the released proxy")
			}
		})
	}
}

// The store's class is namespace, selector and target: a flow waiting for a
// target its only proxy cools for gets its request for another target at
// once, and its next request for the cooling target is refused as a
// ReasonNoMatch that counts the proxy free for it and the request ahead.
func TestWaitingTargetDoesNotBlockItsFlowsOtherTargets(t *testing.T) {
	e := newWaiterEnv(t, flowcontrol.Options{})
	cool := e.hold(t)
	if err := e.store.Report(cool.ID, lease.ResultRateLimited, "a.test"); err != nil {
		t.Fatal(err)
	}
	e.store.Release(cool.ID)
	now := e.clk.Now()
	req := func(target string) lease.AcquireRequest {
		return lease.AcquireRequest{Namespace: "ns", Holder: "http:f", Flow: "http:f", Target: target}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := e.waitAsync(ctx, req("a.test"), now.Add(time.Minute))
	e.waitQueued(t, 1)

	l, err := e.wait(context.Background(), req("b.test"), 0, now)
	if err != nil {
		t.Fatalf("the flow's request for b.test behind its waiting a.test: %v", err)
	}
	e.store.Release(l.ID)

	_, err = e.wait(context.Background(), req("a.test"), 0, now)
	want := &Error{Reason: ReasonNoMatch, Counts: lease.NoMatchError{Considered: 1, InCooldown: 1}, QueuedAhead: 1}
	got := AsError(err)
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Error{}, "Cause")); diff != "" {
		t.Errorf("second request for a.test (-want +got):\n%s", diff)
	}
	cancel()
	if r := receive(t, ch); !IsCancelled(r.err) {
		t.Errorf("the cancelled waiter: %v", r.err)
	}
}
