package controller

import (
	"k8s.io/apimachinery/pkg/runtime"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// Event reasons. Transitions that are also condition reasons reuse the API's
// reason constants, so `kubectl describe` reads the same word in both places.
const (
	EventReasonProvisioning    = crawlv1alpha1.ReasonProvisioning
	EventReasonCreated         = crawlv1alpha1.ReasonCreated
	EventReasonReplacing       = crawlv1alpha1.ReasonReplacing
	EventReasonQuotaExceeded   = crawlv1alpha1.ReasonQuotaExceeded
	EventReasonPermanentError  = crawlv1alpha1.ReasonPermanentError
	EventReasonCloudInitError  = crawlv1alpha1.ReasonCloudInitError
	EventReasonProviderError   = crawlv1alpha1.ReasonProviderError
	EventReasonInstanceStopped = crawlv1alpha1.ReasonInstanceStopped
	EventReasonCreateFailed    = crawlv1alpha1.ReasonCreateFailed
	EventReasonDeleting        = crawlv1alpha1.ReasonDeleting
	// EventReasonDeleted: the instance is gone and the finalizer released.
	EventReasonDeleted = "Deleted"
	// EventReasonUnhealthy / EventReasonRecovered: health verdict flips.
	EventReasonUnhealthy = "Unhealthy"
	EventReasonRecovered = "Recovered"
)

// Actions of events.k8s.io Events (what the controller did or tried).
const (
	actionCreate    = "Create"
	actionGet       = "Get"
	actionDelete    = "Delete"
	actionReplace   = "Replace"
	actionResolve   = "ResolveCloudInit"
	actionReconcile = "Reconcile"
	actionProbe     = "Probe"
)

// event emits a Kubernetes Event about p; a nil Recorder emits nothing.
func (r *ProxyReconciler) event(p runtime.Object, eventType, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(p, nil, eventType, reason, action, note, args...)
}
