package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// RBAC of the operator's ClusterRole (generated into artifacts/rbac by
// controller-gen), only the verbs used: Proxies are read through the cache
// (list, watch) and updated for the finalizer and spec-hash annotation;
// status is only ever merge-patched; Secrets are cached (the label selector
// restricts what is held, not what may be read). Events go through the
// events.k8s.io API (the manager's GetEventRecorder; patch is for event
// series). Pods are for the kubernetes provider, which runs in this process
// and polls pods directly without a watch; it also writes each pod's proxy
// auth Secret (create, update on a retry, delete with the pod).
//
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies/status,verbs=patch
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;create;delete

// ControllerName names the controller (logs, metrics) and the events'
// reporting controller.
const ControllerName = "proxy"

// SecretRefIndex is the field index of Proxies by
// spec.cloudInit.secretRef.name, which the Secret watch uses to find the
// Proxies referencing a Secret. SetupWithManager registers it.
const SecretRefIndex = "spec.cloudInit.secretRef.name"

// MaxConcurrentReconciles is the number of Proxies reconciled in parallel.
const MaxConcurrentReconciles = 3

// Providers looks up an enabled provider by the name a Proxy's
// spec.provider gives. *provider.Registry satisfies it.
type Providers interface {
	// Get returns the provider registered under name, and false if none is.
	// It must be safe for concurrent use.
	Get(name string) (provider.Provider, bool)
}

var _ Providers = (*provider.Registry)(nil)

// Intervals are the reconciler's requeue delays. Zero fields take the
// defaults of DefaultIntervals.
type Intervals struct {
	// ProvisioningPoll: how soon to look again at an instance that is being
	// created (provider Get until Running).
	ProvisioningPoll time.Duration
	// DeletionPoll: how soon to look again at an instance being deleted
	// (replacement, Stopped instance, finalizer path).
	DeletionPoll time.Duration
	// DriftPoll: how often a Running instance is re-checked with Get, to
	// notice one that stopped or vanished.
	DriftPoll time.Duration
	// QuotaRetry: the wait after the provider reported exhausted quota.
	QuotaRetry time.Duration
	// RequeueNow: the short delay standing in for an immediate requeue
	// (ctrl.Result.Requeue is deprecated).
	RequeueNow time.Duration
	// CreateRetry: the first wait after a create the provider accepted and
	// then failed (the instance never came up); it doubles with every
	// such failure in a row, up to QuotaRetry.
	CreateRetry time.Duration
}

// DefaultIntervals returns the production intervals.
func DefaultIntervals() Intervals {
	return Intervals{
		ProvisioningPoll: 5 * time.Second,
		DeletionPoll:     5 * time.Second,
		DriftPoll:        time.Minute,
		QuotaRetry:       5 * time.Minute,
		RequeueNow:       time.Second,
		CreateRetry:      15 * time.Second,
	}
}

// WithDefaults returns i with every zero or negative field replaced by its
// default.
func (i Intervals) WithDefaults() Intervals {
	d := DefaultIntervals()
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&i.ProvisioningPoll, d.ProvisioningPoll},
		{&i.DeletionPoll, d.DeletionPoll},
		{&i.DriftPoll, d.DriftPoll},
		{&i.QuotaRetry, d.QuotaRetry},
		{&i.RequeueNow, d.RequeueNow},
		{&i.CreateRetry, d.CreateRetry},
	} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	return i
}

// InstanceAuth is the proxy auth configuration of the instance of a Proxy
// (pkg/proxyauth: the helper's configuration, with the proxy's own key);
// *proxyauth.Instances implements it.
type InstanceAuth interface {
	// InstanceAuth returns the configuration of Proxy namespace/name.
	InstanceAuth(namespace, name string) []byte
}

// ProxyReconciler reconciles Proxy objects. Fields are set by the composition
// root before SetupWithManager; Client, Providers are required, the rest are
// optional (nil Recorder: no events; nil Health and HealthEvents: no health
// representation; nil Clock: the real clock).
type ProxyReconciler struct {
	// Client reads from the manager's cache (Proxies, labelled Secrets) and
	// writes to the API server.
	Client client.Client
	// Providers resolves spec.provider.
	Providers Providers
	// Recorder emits Kubernetes Events on transitions.
	Recorder events.EventRecorder
	// Health holds the health engine's verdicts; nil means none yet.
	Health HealthSource
	// HealthEvents carries the engine's transition notifications; each one
	// enqueues its Proxy so the new verdict reaches status.
	HealthEvents <-chan event.TypedGenericEvent[*crawlv1alpha1.Proxy]
	// Intervals are the requeue delays (zero fields: defaults).
	Intervals Intervals
	// Clock stamps condition transitions and health times.
	Clock clock.PassiveClock
	// Tag is the tag instances are created with (default provider.DefaultTag).
	Tag string
	// ProxyAuth gives each instance its proxy auth configuration (nil:
	// instances check no credentials).
	ProxyAuth InstanceAuth

	// createFailures backs off creates whose instance vanished (in memory,
	// like the workqueue's own backoff).
	createFailures createFailures
}

// CacheByObject returns the manager cache restrictions the reconciler relies
// on: only Secrets labelled crawl.example.com/cloud-init=true are cached, so
// the operator never holds every Secret in memory, and unlabelled Secrets are
// invisible (a reference to one surfaces as CloudInitError).
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Secret{}: {
			Label: labels.SelectorFromSet(labels.Set{crawlv1alpha1.CloudInitSecretLabel: "true"}),
		},
	}
}

// SetupWithManager indexes Proxies by referenced Secret and registers the
// controller: Proxies (ignoring status-only updates, which are our own
// writes), labelled Secrets mapped to the Proxies referencing them, and the
// health channel.
func (r *ProxyReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil || r.Providers == nil {
		return errors.New("proxy reconciler: Client and Providers are required")
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &crawlv1alpha1.Proxy{}, SecretRefIndex, secretRefIndexValue); err != nil {
		return fmt.Errorf("indexing proxies by %s: %w", SecretRefIndex, err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&crawlv1alpha1.Proxy{}, builder.WithPredicates(reconcileRelevantChange())).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.proxiesForSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: MaxConcurrentReconciles})
	if r.HealthEvents != nil {
		b = b.WatchesRawSource(source.Channel(r.HealthEvents, &handler.TypedEnqueueRequestForObject[*crawlv1alpha1.Proxy]{}))
	}
	return b.Complete(r)
}

// secretRefIndexValue is the SecretRefIndex extractor.
func secretRefIndexValue(o client.Object) []string {
	p, ok := o.(*crawlv1alpha1.Proxy)
	if !ok || p.Spec.CloudInit == nil || p.Spec.CloudInit.SecretRef == nil || p.Spec.CloudInit.SecretRef.Name == "" {
		return nil
	}
	return []string{p.Spec.CloudInit.SecretRef.Name}
}

// proxiesForSecret maps a (labelled) Secret event to the Proxies in its
// namespace that reference it: rotating the Secret re-enqueues them, and the
// spec hash, which covers the resolved cloud-init, triggers replacement.
func (r *ProxyReconciler) proxiesForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list crawlv1alpha1.ProxyList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{SecretRefIndex: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing proxies referencing secret", "secret", client.ObjectKeyFromObject(o))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// reconcileRelevantChange passes creates, deletes and updates that change
// what the reconciler acts on — generation (spec), deletion, finalizers,
// annotations (the spec hash) — and drops status-only updates, which are the
// reconciler's own writes and would only cost a provider Get each.
func reconcileRelevantChange() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			return o.GetGeneration() != n.GetGeneration() ||
				!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
				!equalStrings(o.GetFinalizers(), n.GetFinalizers()) ||
				!equalStringMaps(o.GetAnnotations(), n.GetAnnotations())
		},
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalStringMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Reconcile fetches the Proxy, dispatches on deletion and mode, and writes
// status at most once, in a deferred diff against the object as read.
func (r *ProxyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	var p crawlv1alpha1.Proxy
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting proxy %s: %w", req.NamespacedName, err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("generation", p.Generation))

	rc := &reconcileCtx{proxy: &p, base: p.DeepCopy()}
	defer func() {
		err := r.finish(ctx, rc)
		if errors.Is(err, errStaleRead) && retErr == nil {
			log.FromContext(ctx).V(1).Info("read a stale Proxy, reconciling again")
			res = ctrl.Result{RequeueAfter: r.intervals().RequeueNow}
			return
		}
		if err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()

	switch {
	case !p.DeletionTimestamp.IsZero():
		return r.reconcileDelete(ctx, rc)
	case p.Spec.IsExternal():
		return r.reconcileExternal(ctx, rc)
	default:
		return r.reconcileManaged(ctx, rc)
	}
}

// reconcileCtx is one reconcile's state: the object being staged, the
// snapshot its status is diffed against, and what is left to write.
type reconcileCtx struct {
	proxy *crawlv1alpha1.Proxy
	base  *crawlv1alpha1.Proxy
	// metaChanged: finalizers or annotations were staged on proxy and are
	// written by finish, after the status.
	metaChanged bool
	// gone is set once the finalizer was removed: the object is deleted
	// and there is nothing left to write.
	gone bool
}

// key returns the Proxy's namespace/name.
func (rc *reconcileCtx) key() types.NamespacedName {
	return client.ObjectKeyFromObject(rc.proxy)
}

// finish writes what the reconcile staged: first the status (at most one
// patch, only if changed), then metadata. That order matters: the metadata
// update's watch event starts the next reconcile, which must find the status
// of this one in the cache — otherwise it would, say, see a new spec-hash
// annotation but no providerID yet and call Create again. A failed status
// patch skips the metadata update; the next reconcile redoes both
// idempotently.
func (r *ProxyReconciler) finish(ctx context.Context, rc *reconcileCtx) error {
	if rc.gone {
		return nil
	}
	if err := r.patchStatusIfChanged(ctx, rc); err != nil {
		return err
	}
	if rc.metaChanged {
		return r.updateMeta(ctx, rc.proxy)
	}
	return nil
}

// updateMeta writes metadata (finalizers, annotations) with Update while
// keeping the status staged so far: Update decodes the server's object,
// status included, into p, which would silently drop staged changes.
func (r *ProxyReconciler) updateMeta(ctx context.Context, p *crawlv1alpha1.Proxy) error {
	staged := p.Status.DeepCopy()
	err := r.Client.Update(ctx, p)
	p.Status = *staged
	if err != nil {
		return fmt.Errorf("updating proxy %s: %w", client.ObjectKeyFromObject(p), err)
	}
	return nil
}

func (r *ProxyReconciler) intervals() Intervals { return r.Intervals.WithDefaults() }

func (r *ProxyReconciler) now() time.Time {
	if r.Clock == nil {
		return clock.RealClock{}.Now()
	}
	return r.Clock.Now()
}

func (r *ProxyReconciler) tag() string {
	if r.Tag == "" {
		return provider.DefaultTag
	}
	return r.Tag
}
