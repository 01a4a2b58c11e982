package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/health"
)

// HealthSource is the health engine as the reconciler sees it: the engine owns
// health state, the reconciler its representation in status. *health.Engine
// implements it. A snapshot's Reason, when empty, means ProbeSucceeded when
// Healthy and ProbeFailed otherwise; a zero Latency or CheckedAt leaves
// status.latencyMillis or lastHealthCheckTime as they are; a ProxyURL other
// than the Proxy's current one marks a verdict about a previous instance,
// which is ignored.
type HealthSource interface {
	// Snapshot returns the current verdict for the Proxy key, and false when
	// the engine has none (never probed, or state pruned after the instance
	// changed). It must be cheap, non-blocking and safe for concurrent use;
	// the returned value is the caller's.
	Snapshot(key types.NamespacedName) (health.Snapshot, bool)
}

// applyHealth stages the engine's verdict, if any, into the Healthy
// condition, probedURL, latencyMillis and lastHealthCheckTime, and emits Unhealthy /
// Recovered events on verdict flips. A nil Health or a missing snapshot
// leaves status as it is.
func (r *ProxyReconciler) applyHealth(rc *reconcileCtx) {
	if r.Health == nil {
		return
	}
	p := rc.proxy
	snap, ok := r.Health.Snapshot(rc.key())
	if !ok {
		return
	}
	if snap.ProxyURL != "" && snap.ProxyURL != p.ProxyURL() {
		return
	}
	prev := healthStatus(p)
	status, reason := metav1.ConditionFalse, crawlv1alpha1.ReasonProbeFailed
	if snap.Healthy {
		status, reason = metav1.ConditionTrue, crawlv1alpha1.ReasonProbeSucceeded
	}
	if snap.Reason != "" {
		reason = snap.Reason
	}
	msg := snap.Message
	if msg == "" {
		msg = fmt.Sprintf("probe through %s %s", p.ProxyURL(), map[bool]string{true: "succeeded", false: "failed"}[snap.Healthy])
	}
	r.setCondition(p, crawlv1alpha1.ConditionHealthy, status, reason, msg)
	p.Status.ProbedURL = p.ProxyURL()
	if snap.Latency > 0 {
		ms := snap.Latency.Milliseconds()
		p.Status.LatencyMillis = &ms
	} else {
		p.Status.LatencyMillis = nil
	}
	if !snap.CheckedAt.IsZero() {
		t := apiTime(snap.CheckedAt)
		p.Status.LastHealthCheckTime = &t
	} else {
		p.Status.LastHealthCheckTime = nil
	}
	switch {
	case status == metav1.ConditionFalse && prev != metav1.ConditionFalse:
		r.event(p, corev1.EventTypeWarning, EventReasonUnhealthy, actionProbe, "Proxy is unhealthy: %s", msg)
	case status == metav1.ConditionTrue && prev == metav1.ConditionFalse:
		r.event(p, corev1.EventTypeNormal, EventReasonRecovered, actionProbe, "Proxy recovered: %s", msg)
	}
}
