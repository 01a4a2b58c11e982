package proxylease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/leasing/leasingtest"
)

func TestWaitingCreateGoesThroughTheWaiter(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	w := f.queue
	ctx := ctxFor("ns", "carol")
	waiting := func(name string) *leasingv1alpha1.ProxyLease {
		return newLease(name, func(pl *leasingv1alpha1.ProxyLease) {
			pl.Spec.WaitSeconds = 5
			pl.Spec.Priority = 3
			pl.Spec.Target = "example.com"
		})
	}
	got := f.mustCreate(ctx, waiting("w1"))
	if got.Status.Proxy == nil || got.Status.Proxy.Name != "px" {
		t.Fatalf("status %+v", got.Status)
	}
	want := []leasingtest.Call{{
		Req:      lease.AcquireRequest{Namespace: "ns", Name: "w1", Target: "example.com", TTL: 5 * time.Minute, Holder: "carol", Flow: "carol"},
		Priority: 3, Deadline: epoch.Add(5 * time.Second),
	}}
	// The metadata the store keeps is checked where it is rendered.
	if diff := cmp.Diff(want, w.Calls(), cmpopts.IgnoreFields(lease.AcquireRequest{}, "Meta")); diff != "" {
		t.Errorf("waiter calls (-want +got):\n%s", diff)
	}
	// Without waitSeconds the request goes through the waiter too, with a
	// deadline of now: no create bypasses the queue's fairness.
	f.mustCreate(ctx, newLease("direct"))
	if calls := w.Calls(); len(calls) != 2 || !calls[1].Deadline.Equal(epoch) {
		t.Errorf("waiter calls %+v, want a second one with deadline %s", calls, epoch)
	}
	// Over the server's maximum wait: 422.
	_, err := f.create(ctx, newLease("long", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.WaitSeconds = 31 }))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.waitSeconds") {
		t.Errorf("waitSeconds over the maximum: %v", err)
	}

	queueFull := &leasing.Error{Reason: leasing.ReasonQueueFull, RetryAfter: 2500 * time.Millisecond, Cause: errors.New("queue full")}
	tests := []struct {
		res   error
		check func(error) bool
		text  string
	}{
		{queueFull, apierrors.IsTooManyRequests, "wait queue"},
		{&leasing.Error{Reason: leasing.ReasonNoMatch, Cause: lease.ErrNoMatch}, apierrors.IsConflict, "within waitSeconds (5)"},
		{&leasing.Error{Reason: leasing.ReasonNoMatch, Counts: lease.NoMatchError{Considered: 2, AtCapacity: 2}}, apierrors.IsConflict, "at capacity 2"},
		{&leasing.Error{Reason: leasing.ReasonCancelled, Cause: fmt.Errorf("waiting: %w", context.Canceled)}, apierrors.IsTimeout, "gave up"},
		{&leasing.Error{Reason: leasing.ReasonShuttingDown, Cause: leasing.ErrShuttingDown}, apierrors.IsServiceUnavailable, "shutting down"},
		{leasing.FromStore(errors.New("a bug")), apierrors.IsInternalError, "a bug"},
	}
	for i, tt := range tests {
		w.Next(tt.res)
		_, err := f.create(ctx, waiting(fmt.Sprintf("e%d", i)))
		if !tt.check(err) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("waiter result %+v answered %v", tt.res, err)
		}
		if _, gerr := f.rest.Get(ctx, fmt.Sprintf("e%d", i), nil); !apierrors.IsNotFound(gerr) {
			t.Errorf("failed wait left a lease: %v", gerr)
		}
	}
	w.Next(queueFull)
	_, err = f.create(ctx, waiting("retry"))
	if d, ok := apierrors.SuggestsClientDelay(err); !ok || d != 3 {
		t.Errorf("429 suggests a delay of %d (%v), want 3s", d, ok)
	}
}

func TestServerSideApplyCreatesThenRenews(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	apply := func(ttl int32) (runtime.Object, bool, error) {
		return f.rest.Update(ctx, "applied", rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			pl := old.(*leasingv1alpha1.ProxyLease).DeepCopy()
			pl.Name, pl.Namespace = "applied", "ns"
			pl.Spec.TTLSeconds = ptr.To(ttl)
			return pl, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, true, &metav1.UpdateOptions{})
	}
	obj, created, err := apply(60)
	if err != nil || !created {
		t.Fatalf("first apply: created=%v err=%v", created, err)
	}
	first := obj.(*leasingv1alpha1.ProxyLease)
	if first.Status.Proxy == nil {
		t.Fatal("applied lease has no proxy")
	}
	f.clock.Step(10 * time.Second)
	obj, created, err = apply(120)
	if err != nil || created {
		t.Fatalf("second apply: created=%v err=%v", created, err)
	}
	if want := epoch.Add(130 * time.Second); !obj.(*leasingv1alpha1.ProxyLease).Status.ExpireTime.Time.Equal(want) {
		t.Errorf("expireTime %v, want %v", obj.(*leasingv1alpha1.ProxyLease).Status.ExpireTime, want)
	}
	// Negative control: a plain PUT of a missing lease does not create one.
	_, _, err = f.rest.Update(ctx, "missing", rest.DefaultUpdatedObjectInfo(newLease("missing")), nil, nil, false, nil)
	if !apierrors.IsNotFound(err) {
		t.Errorf("PUT of a missing lease: %v, want NotFound", err)
	}
}

// ProxyLease creates are counted once, by the Kubernetes door of the lease
// path: granted, no_match, and bad_request for one refused by validation.
func TestCreatesAreCountedByTheKubernetesDoor(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	rec := f.rec
	ctx := ctxFor("ns", "carol")
	f.mustCreate(ctx, newLease("one"))
	if _, err := f.create(ctx, newLease("two")); !apierrors.IsConflict(err) {
		t.Fatalf("second lease on the only proxy: %v, want 409", err)
	}
	if _, err := f.create(ctx, newLease("long", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.WaitSeconds = 31 })); !apierrors.IsInvalid(err) {
		t.Fatalf("waitSeconds over the maximum: %v, want 422", err)
	}
	want := []string{"kubernetes/granted", "kubernetes/no_match", "kubernetes/bad_request"}
	if d := cmp.Diff(want, rec.got); d != "" {
		t.Errorf("counted (-want +got):\n%s", d)
	}
}

type outcomes struct{ got []string }

func (o *outcomes) LeaseRequest(api, outcome string) { o.got = append(o.got, api+"/"+outcome) }
