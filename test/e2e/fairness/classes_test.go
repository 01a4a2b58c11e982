package fairnesse2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// coolFor puts the test proxy in cooldown for target: lease it for target,
// report rate_limited, release.
func coolFor(t *testing.T, hc *http.Client, target string) {
	t.Helper()
	ctx := t.Context()
	req := leaseRequest(0)
	req.Target = target
	a, err := postLease(ctx, hc, identityB, req)
	if err != nil {
		t.Fatal(err)
	}
	l, err := granted(a)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := call(ctx, hc, identityB, http.MethodPost, shared.discovery+"/v1/leases/"+l.LeaseID+"/report",
		[]byte(`{"result":"rate_limited","target":"`+target+`"}`))
	if err != nil || rep.code != http.StatusNoContent {
		t.Fatalf("report: %v %v, want 204", rep, err)
	}
	if err := deleteLease(ctx, hc, identityB, l.LeaseID); err != nil {
		t.Fatal(err)
	}
}

// A flow waiting for a target its only proxy cools for does not hold back
// its own request for another target: granted at once, on both APIs. A
// further request for the cooling target is refused with a body that says
// what waits ahead of it (the distinct refusal), and its counts add up.
func TestWaitingTargetDoesNotBlockTheFlowsOtherTargets(t *testing.T) {
	t.Run("HTTP", func(t *testing.T) {
		ctx := t.Context()
		hc := newHTTPClient()
		const cooling, other = "cooling-http.test", "other-http.test"
		coolFor(t, hc, cooling)

		waitCtx, cancelWait := context.WithCancel(ctx)
		waited := make(chan httpAnswer, 1)
		go func() {
			req := leaseRequest(20)
			req.Target = cooling
			a, _ := postLease(waitCtx, newHTTPClient(), identityA, req)
			waited <- a
		}()
		waitQueued(t, 1)

		req := leaseRequest(0)
		req.Target = other
		sent := time.Now()
		a, err := postLease(ctx, hc, identityA, req)
		if err != nil {
			t.Fatal(err)
		}
		l, err := granted(a)
		if err != nil {
			t.Fatalf("the flow's request for another target behind its waiting one: %v", err)
		}
		t.Logf("granted in %s while the flow's request for %s waits", time.Since(sent), cooling)
		if err := deleteLease(ctx, hc, identityA, l.LeaseID); err != nil {
			t.Fatal(err)
		}

		req.Target = cooling
		a, err = postLease(ctx, hc, identityA, req)
		if err != nil {
			t.Fatal(err)
		}
		var body wire.Error
		if a.code != http.StatusConflict || json.Unmarshal(a.body, &body) != nil || body.Error != wire.CodeNoMatch {
			t.Fatalf("second request for the cooling target: %s, want 409 no_match", a)
		}
		if body.QueuedAhead == nil || *body.QueuedAhead != 1 || body.InCooldown == nil || *body.InCooldown != 1 {
			t.Errorf("refusal %s: want queuedAhead 1 and inCooldown 1", a)
		}
		sum := *body.AtCapacity + *body.InCooldown + *body.Unhealthy + *body.Free
		if *body.Considered != sum {
			t.Errorf("refusal %s: considered %d, the other counts add up to %d", a, *body.Considered, sum)
		}

		cancelWait()
		<-waited
		waitQueued(t, 0)
	})

	t.Run("ProxyLease", func(t *testing.T) {
		ctx := t.Context()
		cr := saCrawlers(t)["crawler-a"].leasing.LeasingV1alpha1().ProxyLeases(testNamespace)
		const cooling, other = "cooling-k8s.test", "other-k8s.test"
		coolFor(t, newHTTPClient(), cooling)

		waitCtx, cancelWait := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() {
			pl := newProxyLease("wait-cooling", 20)
			pl.Spec.Target = cooling
			_, err := cr.Create(waitCtx, pl, metav1.CreateOptions{})
			waited <- err
		}()
		waitQueued(t, 1)

		pl := newProxyLease("other", 0)
		pl.Spec.Target = other
		got, err := cr.Create(ctx, pl, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the user's ProxyLease for another target behind its waiting one: %v", err)
		}
		if err := checkLeased(got, saCrawlers(t)["crawler-a"].user); err != nil {
			t.Error(err)
		}
		if err := cr.Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		pl = newProxyLease("again-cooling", 0)
		pl.Spec.Target = cooling
		_, err = cr.Create(ctx, pl, metav1.CreateOptions{})
		if !apierrors.IsConflict(err) {
			t.Fatalf("second ProxyLease for the cooling target: %v, want 409 Conflict", err)
		}
		causes := map[metav1.CauseType]string{}
		for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
			causes[c.Type] = c.Message
		}
		if causes[proxylease.CauseRequestsQueuedAhead] != "1" || causes[proxylease.CauseProxiesInCooldown] != "1" {
			t.Errorf("causes %v: want 1 request queued ahead and 1 proxy in cooldown", causes)
		}

		cancelWait()
		<-waited
		waitQueued(t, 0)
	})
}
