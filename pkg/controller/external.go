package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// reconcileExternal represents a proxy someone else runs (docs/architecture.md, "A Proxy's life"): its
// address is spec.endpoint.host, it is Provisioned by definition, and its
// health comes from the engine like any other. No provider is ever called
// and no finalizer is added — there is nothing to clean up. Health changes
// arrive over the health channel, so there is no periodic requeue.
func (r *ProxyReconciler) reconcileExternal(_ context.Context, rc *reconcileCtx) (ctrl.Result, error) {
	p := rc.proxy
	if p.Spec.Endpoint == nil || p.Spec.Endpoint.Host == "" {
		// The CRD's validation requires an endpoint in External mode; this
		// guards objects written before that rule or with it bypassed.
		r.failPermanently(p, "spec.endpoint.host is required in External mode")
		return ctrl.Result{}, nil
	}
	if p.Status.IP != p.Spec.Endpoint.Host {
		clearHealth(p)
		p.Status.IP = p.Spec.Endpoint.Host
	}
	if !p.HealthIsAboutThisAddress() {
		clearHealth(p) // the port changed: a verdict about another address is not about this one
	}
	r.setProvisioned(p, metav1.ConditionTrue, crawlv1alpha1.ReasonExternalEndpoint, "external endpoint "+p.ProxyURL())
	r.applyHealth(rc)
	return ctrl.Result{}, nil
}
