package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// reconcileDelete is the finalizer path (docs/architecture.md, "A Proxy's life"): delete the instance, poll
// until it is gone, then release the finalizer. It never latches: a
// permanent error here is reported and retried with backoff, because a
// latched deletion could only be unwedged by editing finalizers by hand.
func (r *ProxyReconciler) reconcileDelete(ctx context.Context, rc *reconcileCtx) (ctrl.Result, error) {
	p := rc.proxy
	if !controllerutil.ContainsFinalizer(p, crawlv1alpha1.FinalizerName) {
		return ctrl.Result{}, nil
	}
	id := p.Status.ProviderID
	if id == "" {
		return r.releaseFinalizer(ctx, rc, "")
	}
	prov, ok := r.Providers.Get(p.Spec.Provider)
	if !ok {
		// The instance exists but nothing here can delete it (the provider
		// was disabled): keep the finalizer and keep asking.
		err := provider.Permanent(fmt.Errorf("provider %q is not enabled; cannot delete instance %s", p.Spec.Provider, id))
		return r.deleteFailure(rc, err)
	}
	_, err := prov.Get(ctx, id)
	if provider.IsNotFound(err) {
		return r.releaseFinalizer(ctx, rc, id)
	}
	if err != nil {
		return r.deleteFailure(rc, fmt.Errorf("getting instance %s: %w", id, err))
	}
	if err := prov.Delete(ctx, id); err != nil {
		return r.deleteFailure(rc, fmt.Errorf("deleting instance %s: %w", id, err))
	}
	p.Status.IP = ""
	clearHealth(p)
	if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonDeleting, fmt.Sprintf("deleting instance %s", id)) {
		r.event(p, corev1.EventTypeNormal, EventReasonDeleting, actionDelete, "Deleting instance %s", id)
	}
	return ctrl.Result{RequeueAfter: r.intervals().DeletionPoll}, nil
}

// releaseFinalizer removes the finalizer once no instance is left; the API
// server then deletes the object, so no status is written afterwards.
func (r *ProxyReconciler) releaseFinalizer(ctx context.Context, rc *reconcileCtx, deletedID string) (ctrl.Result, error) {
	p := rc.proxy
	controllerutil.RemoveFinalizer(p, crawlv1alpha1.FinalizerName)
	// Written now, not after the status: once it succeeds the object is
	// gone and there is no status left to write.
	if err := r.updateMeta(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	rc.gone = true
	r.createFailures.reset(p.UID)
	if deletedID != "" {
		r.event(p, corev1.EventTypeNormal, EventReasonDeleted, actionDelete, "Instance %s deleted", deletedID)
		log.FromContext(ctx).Info("instance deleted; finalizer released", "providerID", deletedID)
	}
	return ctrl.Result{}, nil
}

// deleteFailure answers an error on the delete path. Quota waits like
// elsewhere; everything else — permanent included — is returned for
// backoff, with a permanent error also shown in the Provisioned condition.
func (r *ProxyReconciler) deleteFailure(rc *reconcileCtx, err error) (ctrl.Result, error) {
	p := rc.proxy
	switch {
	case provider.IsQuotaExceeded(err):
		if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonQuotaExceeded, err.Error()) {
			r.event(p, corev1.EventTypeWarning, EventReasonQuotaExceeded, actionDelete, "Provider quota exceeded while deleting, retrying in %s: %v", r.intervals().QuotaRetry, err)
		}
		return ctrl.Result{RequeueAfter: r.intervals().QuotaRetry}, nil
	case provider.IsPermanent(err):
		if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError, err.Error()) {
			r.event(p, corev1.EventTypeWarning, EventReasonPermanentError, actionDelete, "Cannot delete, retrying: %v", err)
		}
	default:
		if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonProviderError, err.Error()) {
			r.event(p, corev1.EventTypeWarning, EventReasonProviderError, actionDelete, "Provider error while deleting, retrying: %v", err)
		}
	}
	return ctrl.Result{}, fmt.Errorf("deleting proxy %s: %w", rc.key(), err)
}
