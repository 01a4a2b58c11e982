package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// providerFailure answers a provider error outside the delete path by its
// class:
//
//   - quota: Provisioned=False/QuotaExceeded, requeue after QuotaRetry with a
//     nil error — a wait, off the backoff curve, never Failed;
//   - permanent: Provisioned=False/PermanentError at this generation — the
//     latch: phase Failed and no retry until the spec changes;
//   - transient (and anything unclassified): returned, so the workqueue
//     backs off exponentially; Provisioned=False/ProviderError is staged so
//     the wait is visible.
//
// A Proxy whose instance is already serving (Provisioned=True) keeps that
// condition on quota and transient errors: a failed poll says nothing about
// the instance, and demoting it would flap the phase on every API blip.
func (r *ProxyReconciler) providerFailure(ctx context.Context, rc *reconcileCtx, action string, err error) (ctrl.Result, error) {
	p := rc.proxy
	msg := err.Error() // callers wrap with what they were doing
	switch {
	case provider.IsQuotaExceeded(err):
		log.FromContext(ctx).Info("provider quota exceeded; waiting", "action", action, "error", err.Error(), "retryAfter", r.intervals().QuotaRetry)
		if isProvisioned(p) {
			r.event(p, corev1.EventTypeWarning, EventReasonQuotaExceeded, action, "Provider quota exceeded, retrying in %s: %v", r.intervals().QuotaRetry, err)
			return ctrl.Result{RequeueAfter: r.intervals().QuotaRetry}, nil
		}
		if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonQuotaExceeded, msg) {
			r.event(p, corev1.EventTypeWarning, EventReasonQuotaExceeded, action, "Provider quota exceeded, retrying in %s: %v", r.intervals().QuotaRetry, err)
		}
		return ctrl.Result{RequeueAfter: r.intervals().QuotaRetry}, nil
	case provider.IsPermanent(err):
		log.FromContext(ctx).Error(err, "permanent provider error; proxy failed until its spec changes", "action", action)
		r.failPermanently(p, msg)
		return ctrl.Result{}, nil
	default:
		if !isProvisioned(p) && r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonProviderError, msg) {
			r.event(p, corev1.EventTypeWarning, EventReasonProviderError, action, "Provider error, retrying: %v", err)
		}
		return ctrl.Result{}, fmt.Errorf("%s for proxy %s: %w", action, rc.key(), err)
	}
}

// failPermanently stages Provisioned=False/PermanentError at the current
// generation — the latch reconcileManaged checks — and emits the event once.
func (r *ProxyReconciler) failPermanently(p *crawlv1alpha1.Proxy, msg string) {
	// A failure again after a spec edit is a new transition even when the
	// message is the same.
	var prevGen int64 = -1
	if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned); c != nil {
		prevGen = c.ObservedGeneration
	}
	if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError, msg) || prevGen != p.Generation {
		r.event(p, corev1.EventTypeWarning, EventReasonPermanentError, actionReconcile, "Permanent error, not retrying until the spec changes: %s", msg)
	}
}

// latched reports whether p failed permanently at its current generation: the
// reconciler stays silent until a spec edit bumps the generation.
func latched(p *crawlv1alpha1.Proxy) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	return c != nil && c.Reason == crawlv1alpha1.ReasonPermanentError && c.ObservedGeneration == p.Generation
}
