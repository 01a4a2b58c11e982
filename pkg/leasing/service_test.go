package leasing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// scriptedQueue answers the next Wait with err (nil: a grant from the
// store) and records every call.
type scriptedQueue struct {
	store *lease.Store
	// next, when set, is the error answering the next call.
	next error
	// afterGrant runs after a grant, before Wait returns.
	afterGrant func()
	calls      []time.Time
}

var _ Queue = (*scriptedQueue)(nil)

func (q *scriptedQueue) Wait(_ context.Context, req lease.AcquireRequest, _ int, deadline time.Time) (*Lease, error) {
	q.calls = append(q.calls, deadline)
	if err := q.next; err != nil {
		q.next = nil
		return nil, err
	}
	l, err := q.store.Acquire(req)
	if err != nil {
		return nil, FromStore(err)
	}
	if q.afterGrant != nil {
		q.afterGrant()
	}
	return l, nil
}

type countingRecorder struct{ got []string }

func (r *countingRecorder) LeaseRequest(api, outcome string) { r.got = append(r.got, api+"/"+outcome) }

type serviceEnv struct {
	clk   *clocktesting.FakeClock
	store *lease.Store
	queue *scriptedQueue
	rec   *countingRecorder
	svc   *Service
}

func newServiceEnv(t *testing.T, maxWait time.Duration) *serviceEnv {
	t.Helper()
	clk := clocktesting.NewFakeClock(epoch)
	store, err := lease.New(lease.Options{MaxTTL: time.Hour, CooldownWindow: time.Minute}, clk)
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "p1", URL: "http://127.0.0.2:3128", Host: "127.0.0.2", Port: 3128, Healthy: true})
	e := &serviceEnv{clk: clk, store: store, queue: &scriptedQueue{store: store}, rec: &countingRecorder{}}
	e.svc, err = NewService(APIHTTP, maxWait, ServiceDeps{Store: store, Queue: e.queue, Clock: clk, Recorder: e.rec})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func request(ttl, wait time.Duration) Request {
	return Request{Namespace: "ns", TTL: ttl, Identity: Identity{Holder: "http:a", Flow: "http:a"}, Wait: wait}
}

// What a request that breaks a bound gets: ReasonInvalid naming the field,
// counted as bad_request, and it never reaches the queue. The in-bounds rows
// are the negative controls: the same check must let them through.
func TestAcquireChecksTheBounds(t *testing.T) {
	tests := []struct {
		name    string
		maxWait time.Duration
		req     Request
		fields  []string
		maxTTL  time.Duration
	}{
		{"in bounds", time.Minute, request(time.Hour, time.Minute), nil, 0},
		{"zero ttl is the default", time.Minute, request(0, 0), nil, 0},
		{"ttl over the maximum", time.Minute, request(time.Hour+time.Second, 0), []string{"ttlSeconds"}, time.Hour},
		{"saturated ttl", time.Minute, request(Seconds(1<<62), 0), []string{"ttlSeconds"}, time.Hour},
		{"negative ttl", time.Minute, request(-time.Second, 0), []string{"ttlSeconds"}, 0},
		{"wait over the maximum", time.Minute, request(0, time.Minute+time.Second), []string{"waitSeconds"}, 0},
		{"negative wait", time.Minute, request(0, -time.Second), []string{"waitSeconds"}, 0},
		{"a wait where none is offered", 0, request(0, time.Second), []string{"waitSeconds"}, 0},
		{"both", time.Minute, request(2*time.Hour, time.Hour), []string{"ttlSeconds", "waitSeconds"}, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newServiceEnv(t, tt.maxWait)
			_, err := e.svc.Acquire(context.Background(), tt.req)
			var fields []string
			if IsInvalid(err) {
				for _, fe := range AsError(err).Fields {
					fields = append(fields, fe.Field)
				}
			} else if err != nil {
				t.Fatalf("Acquire: %v, want ReasonInvalid or a grant", err)
			}
			if d := cmp.Diff(tt.fields, fields); d != "" {
				t.Errorf("invalid fields (-want +got):\n%s", d)
			}
			if got := AsError(err).MaxTTL; err != nil && got != tt.maxTTL {
				t.Errorf("MaxTTL = %s, want %s", got, tt.maxTTL)
			}
			wantCalls, wantOutcome := 1, "http/granted"
			if tt.fields != nil {
				wantCalls, wantOutcome = 0, "http/bad_request"
			}
			if len(e.queue.calls) != wantCalls {
				t.Errorf("queue called %d times, want %d", len(e.queue.calls), wantCalls)
			}
			if d := cmp.Diff([]string{wantOutcome}, e.rec.got); d != "" {
				t.Errorf("counted (-want +got):\n%s", d)
			}
		})
	}
}

// Every acquire goes through the queue, with a deadline of now plus its wait
// (a zero wait: now, so it cannot overtake a waiter).
func TestAcquireAlwaysQueues(t *testing.T) {
	e := newServiceEnv(t, time.Minute)
	for _, wait := range []time.Duration{0, 30 * time.Second} {
		l, err := e.svc.Acquire(context.Background(), request(0, wait))
		if err != nil {
			t.Fatal(err)
		}
		e.store.Release(l.ID)
	}
	if d := cmp.Diff([]time.Time{epoch, epoch.Add(30 * time.Second)}, e.queue.calls); d != "" {
		t.Errorf("queue deadlines (-want +got):\n%s", d)
	}
}

// What the queue or the store answers is one Reason, and the outcome
// counted follows from the Reason alone.
func TestAcquireErrorsHaveOneVocabulary(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		reason  Reason
		outcome string
		check   func(*Error) string
	}{
		{"deadline with counts", &Error{Reason: ReasonNoMatch, Counts: lease.NoMatchError{Considered: 3, AtCapacity: 2, Unhealthy: 1}, QueuedAhead: 2}, ReasonNoMatch, OutcomeNoMatch,
			func(e *Error) string {
				return cmp.Diff(lease.NoMatchError{Considered: 3, AtCapacity: 2, Unhealthy: 1}, e.Counts) + cmp.Diff(2, e.QueuedAhead)
			}},
		{"queue full", &Error{Reason: ReasonQueueFull, RetryAfter: 3 * time.Second, Cause: errors.New("band queue full")}, ReasonQueueFull, OutcomeRejected,
			func(e *Error) string { return cmp.Diff(3*time.Second, e.RetryAfter) }},
		{"caller left", &Error{Reason: ReasonCancelled, Cause: context.Canceled}, ReasonCancelled, OutcomeCancelled, nil},
		{"shutting down", &Error{Reason: ReasonShuttingDown, Cause: ErrShuttingDown}, ReasonShuttingDown, OutcomeError, nil},
		{"the store refuses: name taken", FromStore(&lease.AlreadyExistsError{Namespace: "ns", Name: "x"}), ReasonAlreadyExists, OutcomeBadRequest, nil},
		{"the store refuses: ttl bound", FromStore(&lease.TTLError{Requested: 2 * time.Hour, Max: time.Hour}), ReasonInvalid, OutcomeBadRequest,
			func(e *Error) string { return cmp.Diff(time.Hour, e.MaxTTL) }},
		{"the store refuses: frozen", FromStore(fmt.Errorf("acquire: %w", lease.ErrFrozen)), ReasonShuttingDown, OutcomeError, nil},
		{"the store refuses: a bug", FromStore(errors.New("boom")), ReasonInternal, OutcomeError, nil},
		{"a queue that answers outside the vocabulary", errors.New("?"), ReasonInternal, OutcomeError, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newServiceEnv(t, time.Minute)
			e.queue.next = tt.err
			_, err := e.svc.Acquire(context.Background(), request(0, time.Second))
			if got := ReasonOf(err); got != tt.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tt.reason)
			}
			if tt.check != nil {
				if d := tt.check(AsError(err)); d != "" {
					t.Errorf("error details (-want +got):\n%s", d)
				}
			}
			if d := cmp.Diff([]string{"http/" + tt.outcome}, e.rec.got); d != "" {
				t.Errorf("counted (-want +got):\n%s", d)
			}
		})
	}
}

// A grant that arrives as its caller leaves is given back: nobody would use
// or release it.
func TestAGrantWhoseCallerLeftIsGivenBack(t *testing.T) {
	e := newServiceEnv(t, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	e.queue.afterGrant = cancel
	_, err := e.svc.Acquire(ctx, request(0, time.Second))
	if !IsCancelled(err) {
		t.Fatalf("Acquire = %v, want ReasonCancelled", err)
	}
	if n := e.store.Active(); n != 0 {
		t.Errorf("%d leases left behind", n)
	}
	// Negative control: a caller that stays keeps its lease.
	e.queue.afterGrant = nil
	if _, err := e.svc.Acquire(context.Background(), request(0, 0)); err != nil || e.store.Active() != 1 {
		t.Errorf("a caller that stays: %v, %d active", err, e.store.Active())
	}
}

// Release, Renew, Report and Get speak the same vocabulary: another holder
// is ReasonForbidden and changes nothing, an ended lease is ReasonEnded with
// how it ended, an unknown one ReasonNotFound.
func TestLeaseChangesHaveOneVocabulary(t *testing.T) {
	e := newServiceEnv(t, time.Minute)
	l, err := e.svc.Acquire(context.Background(), request(time.Minute, 0))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := e.store.Get(l.ID)
	mine, other := "http:a", "http:b"
	if _, err := e.svc.Release(other, l.ID); !IsForbidden(err) {
		t.Errorf("release by another holder: %v, want ReasonForbidden", err)
	}
	if _, err := e.svc.Renew(other, l.ID, time.Minute); !IsForbidden(err) {
		t.Errorf("renew by another holder: %v, want ReasonForbidden", err)
	}
	if err := e.svc.Report(other, l.ID, lease.ResultBanned, "x.com"); !IsForbidden(err) {
		t.Errorf("report by another holder: %v, want ReasonForbidden", err)
	}
	if _, err := e.svc.Get(other, l.ID); !IsForbidden(err) {
		t.Errorf("get by another holder: %v, want ReasonForbidden", err)
	}
	if after, _ := e.store.Get(l.ID); !cmp.Equal(before, after) {
		t.Errorf("another holder changed the lease:\n%s", cmp.Diff(before, after))
	}
	if _, err := e.svc.Renew(mine, l.ID, 2*time.Hour); !IsInvalid(err) || AsError(err).MaxTTL != time.Hour {
		t.Errorf("renew over the maximum: %v, want ReasonInvalid with MaxTTL", err)
	}
	if err := e.svc.Report(mine, l.ID, "great", ""); !IsInvalid(err) || AsError(err).Fields[0].Field != "result" {
		t.Errorf("report of an unknown result: %v, want ReasonInvalid on result", err)
	}
	if _, err := e.svc.Renew(mine, l.ID, 30*time.Second); err != nil {
		t.Errorf("renew by the holder: %v", err)
	}
	if ok, err := e.svc.Release(mine, l.ID); !ok || err != nil {
		t.Errorf("release by the holder: %v, %v", ok, err)
	}
	if _, err := e.svc.Renew(mine, l.ID, 0); !IsEnded(err) || AsError(err).EndReason != lease.Released {
		t.Errorf("renew after release: %v, want ReasonEnded (Released)", err)
	}
	if err := e.svc.Report(mine, l.ID, lease.ResultOK, ""); err != nil {
		t.Errorf("report within the cooldown window after release: %v", err)
	}
	if _, err := e.svc.Get(mine, "nope"); !IsNotFound(err) {
		t.Errorf("get unknown: %v, want ReasonNotFound", err)
	}
	if ok, err := e.svc.Release(mine, "nope"); ok || err != nil {
		t.Errorf("release unknown: %v, %v; want idempotent", ok, err)
	}
}

// The dispatcher tells the queue Exhausted only when no proxy at all can take
// a lease, so a dispatch round stops at once; a request that merely matches
// nothing is NoMatch and the round goes on to other flows.
func TestDispatcherSaysExhaustedOnlyWhenNothingIsFree(t *testing.T) {
	e := newWaiterEnv(t, flowcontrol.Options{MaxQueuedPerFlow: 4, MaxQueuedPerBand: 4, MaxQueued: 4})
	d := leaseDispatcher{store: e.store}
	_, v, err := d.TryDispatch("f", lease.AcquireRequest{Namespace: "ns", Selector: map[string]string{"region": "mars"}})
	if err != nil || v != flowcontrol.NoMatch {
		t.Errorf("a selector nothing matches, with a free proxy: %v, %v; want NoMatch", v, err)
	}
	e.hold(t)
	_, v, err = d.TryDispatch("f", lease.AcquireRequest{Namespace: "ns"})
	if err != nil || v != flowcontrol.Exhausted {
		t.Errorf("the only proxy leased: %v, %v; want Exhausted", v, err)
	}
}
