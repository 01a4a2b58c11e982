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

// reconcileManaged is the state machine of a Managed Proxy (docs/architecture.md, "A Proxy's life"):
// finalizer, latch, provider lookup, cloud-init, then create, adopt, replace
// or observe depending on status.providerID and the spec-hash annotation.
func (r *ProxyReconciler) reconcileManaged(ctx context.Context, rc *reconcileCtx) (ctrl.Result, error) {
	p := rc.proxy
	if controllerutil.AddFinalizer(p, crawlv1alpha1.FinalizerName) {
		// The update's watch event brings us back; nothing is created
		// before the finalizer guarantees we will see the deletion.
		rc.metaChanged = true
		return ctrl.Result{}, nil
	}
	if latched(p) {
		return ctrl.Result{}, nil
	}
	prov, ok := r.Providers.Get(p.Spec.Provider)
	if !ok {
		r.failPermanently(p, fmt.Sprintf("provider %q is not enabled in this operator", p.Spec.Provider))
		return ctrl.Result{}, nil
	}
	cloudInit, err := r.resolveCloudInit(ctx, p)
	if err != nil {
		return r.cloudInitFailure(ctx, rc, err)
	}
	var auth []byte
	if r.ProxyAuth != nil {
		auth = r.ProxyAuth.InstanceAuth(p.Namespace, p.Name)
	}
	hash := SpecHash(&p.Spec, cloudInit, auth)
	annotation := p.Annotations[crawlv1alpha1.SpecHashAnnotation]

	switch {
	case p.Status.ProviderID == "":
		return r.createInstance(ctx, rc, prov, instanceInput{cloudInit: cloudInit, auth: auth}, hash)
	case annotation == "":
		// An instance without a recorded hash (older operator, lost
		// annotation): adopt it as matching the current spec.
		setSpecHash(p, hash)
		rc.metaChanged = true
		log.FromContext(ctx).Info("adopting instance", "providerID", p.Status.ProviderID)
		return ctrl.Result{RequeueAfter: r.intervals().RequeueNow}, nil
	case annotation != hash:
		return r.replaceInstance(ctx, rc, prov, hash)
	default:
		return r.observeInstance(ctx, rc, prov)
	}
}

// cloudInitFailure reports an unresolvable cloud-init as
// Provisioned=False/CloudInitError and returns the error for backoff; the
// Secret watch re-enqueues as soon as the Secret appears or changes.
func (r *ProxyReconciler) cloudInitFailure(ctx context.Context, rc *reconcileCtx, err error) (ctrl.Result, error) {
	if !IsCloudInitError(err) {
		return ctrl.Result{}, err // API failure reading the Secret: plain backoff
	}
	p := rc.proxy
	if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonCloudInitError, err.Error()) {
		r.event(p, corev1.EventTypeWarning, EventReasonCloudInitError, actionResolve, "%v", err)
	}
	return ctrl.Result{}, fmt.Errorf("proxy %s: %w", rc.key(), err)
}

// createInstance creates the instance under the deterministic name, records
// its providerID and the spec hash it was built from, and polls it.
// Create is idempotent by name, so a retry after a lost status write finds
// the same instance instead of creating a second.
// instanceInput is what an instance is built from besides the spec.
type instanceInput struct {
	cloudInit string
	auth      []byte
}

func (r *ProxyReconciler) createInstance(ctx context.Context, rc *reconcileCtx, prov provider.Provider, in instanceInput, hash string) (ctrl.Result, error) {
	p := rc.proxy
	if wait, ok := r.createFailures.wait(p.UID, p.Generation, r.now()); ok {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	name := provider.NameFromUID(p.UID)
	id, err := prov.Create(ctx, provider.CreateRequest{
		Name:            name,
		Tag:             r.tag(),
		OwnerUID:        p.UID,
		Namespace:       p.Namespace,
		CloudInit:       in.cloudInit,
		ProxyAuth:       in.auth,
		CloudInitSecret: cloudInitSecretOf(p),
		Proxy:           p.Spec.DeepCopy(),
		SpecHash:        instanceSpecHash(hash),
	})
	if err != nil {
		return r.providerFailure(ctx, rc, actionCreate, fmt.Errorf("creating instance %s: %w", name, err))
	}
	// The status patch (providerID) is written before the annotation update
	// (see Reconcile), so no reconcile ever sees the new hash without the
	// instance it belongs to.
	clearInstance(p)
	p.Status.ProviderID = id
	r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning, fmt.Sprintf("instance %s requested", id))
	r.event(p, corev1.EventTypeNormal, EventReasonProvisioning, actionCreate, "Creating instance %s", id)
	log.FromContext(ctx).Info("instance requested", "providerID", id)
	if p.Annotations[crawlv1alpha1.SpecHashAnnotation] != hash {
		setSpecHash(p, hash)
		rc.metaChanged = true
	}
	return ctrl.Result{RequeueAfter: r.intervals().ProvisioningPoll}, nil
}

// observeInstance polls the instance of a Proxy whose spec hash matches and
// answers each state (annotation == hash).
func (r *ProxyReconciler) observeInstance(ctx context.Context, rc *reconcileCtx, prov provider.Provider) (ctrl.Result, error) {
	p := rc.proxy
	id := p.Status.ProviderID
	inst, err := prov.Get(ctx, id)
	if provider.IsNotFound(err) && replacing(p) {
		// The instance of another spec deleted below is gone.
		return r.replacedInstanceGone(ctx, rc, p.Annotations[crawlv1alpha1.SpecHashAnnotation]), nil
	}
	if provider.IsNotFound(err) && !isProvisioned(p) {
		return r.createFailed(ctx, rc, id)
	}
	if provider.IsNotFound(err) {
		// Vanished (deleted out of band, or a Stopped instance we deleted):
		// forget it; the next pass creates a new one under the same name.
		clearInstance(p)
		r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning, fmt.Sprintf("instance %s is gone; recreating", id))
		return ctrl.Result{RequeueAfter: r.intervals().RequeueNow}, nil
	}
	if err != nil {
		return r.providerFailure(ctx, rc, actionGet, fmt.Errorf("getting instance %s: %w", id, err))
	}
	if inst.SpecHash != "" && inst.SpecHash != instanceSpecHash(p.Annotations[crawlv1alpha1.SpecHashAnnotation]) {
		// Built from another spec: a create that found an older instance
		// under the name (the operator died between an insert and its
		// status write, and the spec changed meanwhile), or an adopted one.
		log.FromContext(ctx).Info("instance was built from another spec; replacing it", "providerID", id, "instanceSpecHash", inst.SpecHash)
		return r.replaceInstance(ctx, rc, prov, p.Annotations[crawlv1alpha1.SpecHashAnnotation])
	}
	switch inst.State {
	case provider.StateRunning:
		if inst.IP == "" { // contract violation; treat as not ready yet
			break
		}
		r.createFailures.reset(p.UID)
		if p.Status.IP != inst.IP {
			clearHealth(p) // a verdict about another address is not about this one
			p.Status.IP = inst.IP
		}
		if r.setProvisioned(p, metav1.ConditionTrue, crawlv1alpha1.ReasonCreated, fmt.Sprintf("instance %s running at %s", id, inst.IP)) {
			r.event(p, corev1.EventTypeNormal, EventReasonCreated, actionGet, "Instance %s is running at %s", id, inst.IP)
		}
		r.applyHealth(rc)
		return ctrl.Result{RequeueAfter: r.intervals().DriftPoll}, nil
	case provider.StateStopped, provider.StateTerminated:
		// Cattle: a stopped instance is deleted and, once gone, recreated.
		if err := prov.Delete(ctx, id); err != nil {
			return r.providerFailure(ctx, rc, actionDelete, fmt.Errorf("deleting %s instance %s: %w", inst.State, id, err))
		}
		p.Status.IP = ""
		clearHealth(p)
		if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonInstanceStopped, fmt.Sprintf("instance %s is %s; deleting to recreate", id, inst.State)) {
			r.event(p, corev1.EventTypeWarning, EventReasonInstanceStopped, actionDelete, "Instance %s is %s; deleting it to recreate", id, inst.State)
		}
		return ctrl.Result{RequeueAfter: r.intervals().DeletionPoll}, nil
	}
	// Provisioning (or Running without an address yet).
	p.Status.IP = ""
	clearHealth(p)
	r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning, fmt.Sprintf("instance %s is provisioning", id))
	return ctrl.Result{RequeueAfter: r.intervals().ProvisioningPoll}, nil
}

// createFailed answers an instance that vanished before it ever ran: the
// provider accepted the create and failed it afterwards (Compute Engine
// reports quota or zone capacity only on the operation, which nobody waits
// on). Recreating at once would loop as fast as the polls; instead a Warning
// Event, Provisioned=False/CreateFailed, and a retry after a delay that
// doubles with each failure in a row. The name is deterministic, so the retry
// cannot duplicate an instance.
func (r *ProxyReconciler) createFailed(ctx context.Context, rc *reconcileCtx, id string) (ctrl.Result, error) {
	p := rc.proxy
	iv := r.intervals()
	delay, n := r.createFailures.record(p.UID, p.Generation, r.now(), iv.CreateRetry, iv.QuotaRetry)
	clearInstance(p)
	msg := fmt.Sprintf("instance %s was accepted by the provider but never came up (%d time(s) in a row; the provider failed the create after accepting it, e.g. quota or zone capacity); retrying in %s", id, n, delay)
	r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonCreateFailed, msg)
	r.event(p, corev1.EventTypeWarning, EventReasonCreateFailed, actionCreate, "Instance %s was accepted but never came up; retrying in %s", id, delay)
	log.FromContext(ctx).Info("instance vanished before running; create failed after being accepted", "providerID", id, "failures", n, "retryAfter", delay)
	return ctrl.Result{RequeueAfter: delay}, nil
}

// instanceSpecHash is the part of a spec hash stored on the instance
// (CreateRequest.SpecHash): 128 bits, short enough for any label value.
func instanceSpecHash(hash string) string {
	const n = 32
	if len(hash) > n {
		return hash[:n]
	}
	return hash
}

// setSpecHash sets the spec-hash annotation on p (not yet written).
func setSpecHash(p *crawlv1alpha1.Proxy, hash string) {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[crawlv1alpha1.SpecHashAnnotation] = hash
}
