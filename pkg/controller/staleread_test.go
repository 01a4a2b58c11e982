package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/health"
)

// healthVerdicts is a HealthSource of fixed verdicts.
type healthVerdicts map[types.NamespacedName]health.Snapshot

var _ HealthSource = healthVerdicts(nil)

func (v healthVerdicts) Snapshot(key types.NamespacedName) (health.Snapshot, bool) {
	s, ok := v[key]
	return s, ok
}

// A reconcile that read the Proxy from a cache behind the last write
// writes nothing and runs again: its merge patch, diffed against the stale
// base, would carry only what changed since that base and leave the last
// write's phase and conditions standing (the flake of
// TestHealthRepresentation: Ready → Unhealthy → a healthy verdict read
// against the Ready copy left the Proxy Unhealthy, nothing requeued).
func TestStatusOfAStaleReadIsNotWritten(t *testing.T) {
	h := newHarness(t, withFinalizer(managedProxy("a")))
	h.key = types.NamespacedName{Namespace: "ns", Name: "a"}
	verdicts := healthVerdicts{}
	h.r.Health = verdicts
	verdict := func(healthy bool, latency time.Duration) {
		verdicts[h.key] = health.Snapshot{Healthy: healthy, Latency: latency, ProxyURL: h.proxy().ProxyURL()}
	}
	for range 3 { // create, then running
		if _, err := h.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	verdict(true, 15*time.Millisecond)
	if _, err := h.reconcile(); err != nil || h.proxy().Status.Phase != crawlv1alpha1.PhaseReady {
		t.Fatalf("a healthy verdict: %v, phase %q; want Ready", err, h.proxy().Status.Phase)
	}
	readyCopy := h.proxy()
	verdict(false, 0)
	if _, err := h.reconcile(); err != nil || h.proxy().Status.Phase != crawlv1alpha1.PhaseUnhealthy {
		t.Fatalf("an unhealthy verdict: %v, phase %q; want Unhealthy", err, h.proxy().Status.Phase)
	}
	before := h.proxy()

	verdict(true, 20*time.Millisecond)
	h.stale = readyCopy
	res, err := h.reconcile()
	if err != nil || res != (ctrl.Result{RequeueAfter: h.interval.RequeueNow}) {
		t.Errorf("the reconcile of a stale read = %+v, %v; want a requeue after %s, no error", res, err, h.interval.RequeueNow)
	}
	if after := h.proxy(); after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("a status diffed against a stale read was written: phase %q, latency %v", after.Status.Phase, *after.Status.LatencyMillis)
	}
	if _, err := h.reconcile(); err != nil || h.proxy().Status.Phase != crawlv1alpha1.PhaseReady {
		t.Errorf("the reconcile again, on a fresh read: %v, phase %q; want Ready", err, h.proxy().Status.Phase)
	}
}
