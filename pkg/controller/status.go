package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// errStaleRead: the Proxy changed since the reconcile read it (its cache
// was behind); nothing was written, and the reconcile runs again.
var errStaleRead = errors.New("the Proxy changed since it was read; reconciling again")

// patchStatusIfChanged is the only status write of the reconciler. It stamps
// observedGeneration, derives the phase, and sends a merge patch of .status
// only when the staged status differs from the one read at the start of the
// reconcile; a steady-state reconcile therefore makes no write at all.
func (r *ProxyReconciler) patchStatusIfChanged(ctx context.Context, rc *reconcileCtx) error {
	p := rc.proxy
	p.Status.ObservedGeneration = p.Generation
	p.Status.Phase = computePhase(p)
	r.setReady(p)
	if equality.Semantic.DeepEqual(rc.base.Status, p.Status) {
		return nil
	}
	// Diff against the current object with the old status so the patch
	// carries .status, plus the resourceVersion the reconcile read (or its
	// own last write left) as a precondition: a merge patch carries only
	// what differs from the base, so a base read from a cache that had not
	// yet seen the previous reconcile's write would leave that write's
	// fields (the phase, a condition) standing under the new ones — a Proxy
	// left Unhealthy with a healthy verdict, and nothing to requeue it.
	orig := p.DeepCopy()
	orig.Status = *rc.base.Status.DeepCopy()
	// Patched on a copy: the response would overwrite metadata staged on p
	// for the update that follows; only its resourceVersion is taken over.
	patched := p.DeepCopy()
	if err := r.Client.Status().Patch(ctx, patched, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted under us: nothing left to describe
		}
		if apierrors.IsConflict(err) {
			return fmt.Errorf("proxy %s: %w", rc.key(), errStaleRead)
		}
		return fmt.Errorf("patching status of proxy %s: %w", rc.key(), err)
	}
	p.ResourceVersion = patched.ResourceVersion
	log.FromContext(ctx).V(1).Info("status written", "phase", p.Status.Phase)
	return nil
}

// computePhase derives the one-word phase from deletion and the conditions:
//
//	deletionTimestamp set                    → Deleting
//	Provisioned reason PermanentError        → Failed
//	Provisioned=True, Healthy=True           → Ready
//	Provisioned=True, Healthy=False          → Unhealthy
//	Provisioned=True, no health verdict yet  → Provisioning (not yet usable)
//	Provisioned=False while an instance is being created, replaced or
//	recreated (Provisioning, Replacing, InstanceStopped) → Provisioning
//	anything else (no condition, waiting on quota, cloud-init or a
//	provider error)                          → Pending
func computePhase(p *crawlv1alpha1.Proxy) crawlv1alpha1.ProxyPhase {
	if !p.DeletionTimestamp.IsZero() {
		return crawlv1alpha1.PhaseDeleting
	}
	prov := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	if prov == nil {
		return crawlv1alpha1.PhasePending
	}
	if prov.Reason == crawlv1alpha1.ReasonPermanentError {
		return crawlv1alpha1.PhaseFailed
	}
	if prov.Status == metav1.ConditionTrue {
		switch healthStatus(p) {
		case metav1.ConditionTrue:
			return crawlv1alpha1.PhaseReady
		case metav1.ConditionFalse:
			return crawlv1alpha1.PhaseUnhealthy
		default:
			return crawlv1alpha1.PhaseProvisioning
		}
	}
	switch prov.Reason {
	case crawlv1alpha1.ReasonProvisioning, crawlv1alpha1.ReasonReplacing, crawlv1alpha1.ReasonInstanceStopped:
		return crawlv1alpha1.PhaseProvisioning
	}
	return crawlv1alpha1.PhasePending
}

// setReady mirrors the phase into the Ready condition, so that
// `kubectl wait --for=condition=Ready proxy/x` works. It changes only when the
// phase does, so it never adds a status write of its own.
func (r *ProxyReconciler) setReady(p *crawlv1alpha1.Proxy) {
	status, message := metav1.ConditionFalse, fmt.Sprintf("phase is %s", p.Status.Phase)
	if p.Status.Phase == crawlv1alpha1.PhaseReady {
		status, message = metav1.ConditionTrue, "provisioned and passing health checks"
	}
	r.setCondition(p, crawlv1alpha1.ConditionReady, status, string(p.Status.Phase), message)
}

func healthStatus(p *crawlv1alpha1.Proxy) metav1.ConditionStatus {
	h := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
	if h == nil {
		return metav1.ConditionUnknown
	}
	return h.Status
}

// setProvisioned stages the Provisioned condition at the current generation
// and reports whether its status, reason or message changed (the trigger for
// a transition event).
func (r *ProxyReconciler) setProvisioned(p *crawlv1alpha1.Proxy, status metav1.ConditionStatus, reason, message string) bool {
	return r.setCondition(p, crawlv1alpha1.ConditionProvisioned, status, reason, message)
}

// setCondition stages a condition; lastTransitionTime comes from the injected
// clock, truncated to the second the API keeps, and is kept by
// meta.SetStatusCondition unless the status flips. It reports whether the
// status, reason or message changed.
func (r *ProxyReconciler) setCondition(p *crawlv1alpha1.Proxy, condType string, status metav1.ConditionStatus, reason, message string) bool {
	prev := meta.FindStatusCondition(p.Status.Conditions, condType)
	changed := prev == nil || prev.Status != status || prev.Reason != reason || prev.Message != message
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: p.Generation,
		LastTransitionTime: apiTime(r.now()),
	})
	return changed
}

// isProvisioned reports whether Provisioned is True.
func isProvisioned(p *crawlv1alpha1.Proxy) bool {
	return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
}

// clearInstance forgets the current instance: its ID, its address and the
// health verdict about it. A new instance starts without a verdict.
func clearInstance(p *crawlv1alpha1.Proxy) {
	p.Status.ProviderID = ""
	p.Status.IP = ""
	clearHealth(p)
}

func clearHealth(p *crawlv1alpha1.Proxy) {
	meta.RemoveStatusCondition(&p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
	p.Status.ProbedURL = ""
	p.Status.LatencyMillis = nil
	p.Status.LastHealthCheckTime = nil
}

// apiTime converts t to the precision metav1.Time keeps on the wire (whole
// seconds, UTC, no monotonic reading) so a staged time compares equal to the
// same time read back from the API server.
func apiTime(t time.Time) metav1.Time {
	return metav1.NewTime(t.UTC().Truncate(time.Second))
}
