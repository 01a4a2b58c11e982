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

// replaceInstance replaces an instance built from an older spec or cloud-init:
// delete it, poll Get until NotFound, then record the new hash and forget the
// instance so the next pass creates the replacement. The replacement has the
// same deterministic name, so creating it before the old one is gone would
// only find the old one again.
func (r *ProxyReconciler) replaceInstance(ctx context.Context, rc *reconcileCtx, prov provider.Provider, hash string) (ctrl.Result, error) {
	p := rc.proxy
	id := p.Status.ProviderID
	_, err := prov.Get(ctx, id)
	if provider.IsNotFound(err) {
		return r.replacedInstanceGone(ctx, rc, hash), nil
	}
	if err != nil {
		return r.providerFailure(ctx, rc, actionGet, fmt.Errorf("getting instance %s to replace: %w", id, err))
	}
	if err := prov.Delete(ctx, id); err != nil {
		return r.providerFailure(ctx, rc, actionDelete, fmt.Errorf("deleting instance %s to replace it: %w", id, err))
	}
	p.Status.IP = ""
	clearHealth(p)
	if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonReplacing, fmt.Sprintf("spec changed; deleting instance %s to replace it", id)) {
		r.event(p, corev1.EventTypeNormal, EventReasonReplacing, actionReplace, "Spec or cloud-init changed; replacing instance %s", id)
		log.FromContext(ctx).Info("replacing instance", "providerID", id)
	}
	return ctrl.Result{RequeueAfter: r.intervals().DeletionPoll}, nil
}

// replacedInstanceGone records that the instance being replaced is gone:
// the new hash, no instance, and the replacement is created on the next pass.
func (r *ProxyReconciler) replacedInstanceGone(ctx context.Context, rc *reconcileCtx, hash string) ctrl.Result {
	p := rc.proxy
	id := p.Status.ProviderID
	if p.Annotations[crawlv1alpha1.SpecHashAnnotation] != hash {
		setSpecHash(p, hash)
		rc.metaChanged = true
	}
	clearInstance(p)
	r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonReplacing, fmt.Sprintf("instance %s deleted; creating its replacement", id))
	log.FromContext(ctx).Info("old instance gone; replacement follows", "providerID", id)
	return ctrl.Result{RequeueAfter: r.intervals().RequeueNow}
}

// replacing reports a replacement in progress (Provisioned=False/Replacing).
func replacing(p *crawlv1alpha1.Proxy) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == crawlv1alpha1.ReasonReplacing
}
