package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "proxypool"

// Demand is the lease demand a pool sizes and drains by; *leasing.Leasing
// implements it.
type Demand interface {
	// Ready is false until this replica serves leases (its store holds
	// them): before that every Proxy would look unleased.
	Ready() bool
	// LeaseCounts are the live leases per Proxy.
	LeaseCounts() map[lease.ProxyKey]int
	// Waiting counts the requests waiting for a lease that match accepts.
	Waiting(match func(lease.AcquireRequest) bool) int
	// LeasesPerProxy is how many leases one Proxy takes.
	LeasesPerProxy() int
}

// pollInterval is how often a pool that autoscales or drains is looked at
// again: lease demand changes without a watch event.
const pollInterval = 2 * time.Second

// +kubebuilder:rbac:groups=crawl.example.com,resources=proxypools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxypools/status,verbs=patch
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler keeps ProxyPools at their desired size.
type Reconciler struct {
	Client client.Client
	Demand Demand
	// Clock times drains and the scale-down delay (default: real).
	Clock   clock.PassiveClock
	Options Options
	// Recorder emits an Event for each decision (nil: none).
	Recorder events.EventRecorder

	mu sync.Mutex
	// lowSince is, per pool, when its demand first fell below its size.
	lowSince map[types.NamespacedName]time.Time
	// expect is, per pool, what its last step must show in the cache.
	expect map[types.NamespacedName]expectation
}

// SetupWithManager registers the controller (leader-elected, as every
// controller of the manager): it watches ProxyPools and the Proxies they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Demand == nil {
		return errors.New("proxypool reconciler: Client and Demand are required")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Options.DrainTimeout <= 0 {
		r.Options.DrainTimeout = DefaultDrainTimeout
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&crawlv1alpha1.ProxyPool{}).
		Owns(&crawlv1alpha1.Proxy{}).
		Complete(r)
}

// Reconcile adopts and releases Proxies, sizes the pool, grows or shrinks it
// one step, and writes the status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	var pool crawlv1alpha1.ProxyPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.setLowSince(req.NamespacedName, time.Time{})
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting pool %s: %w", req.NamespacedName, err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references delete its Proxies
	}
	if !r.Demand.Ready() {
		// Leases not loaded yet: every Proxy would look unleased.
		return ctrl.Result{RequeueAfter: pollInterval}, nil
	}
	base := pool.DeepCopy()
	members, listed, err := r.members(ctx, &pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	counts := r.Demand.LeaseCounts()
	now := r.Clock.Now()
	st := observe(&pool, members, counts, r.Options.DrainTimeout, now)
	st.listed = listed
	waiting := r.Demand.Waiting(func(q lease.AcquireRequest) bool { return serves(&pool, q) })
	dec := Desired(Input{
		Replicas: replicasOf(&pool), Autoscaling: pool.Spec.Autoscaling, Held: st.held, Waiting: waiting, Owned: len(st.live) + len(st.draining),
		PerProxy: r.Demand.LeasesPerProxy(), LowSince: r.getLowSince(req.NamespacedName), Now: now,
	})
	r.setLowSince(req.NamespacedName, dec.LowSince)
	defer func() {
		if err := r.patchStatus(ctx, base, &pool, st, waiting, dec); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	if pool.Spec.Autoscaling != nil && dec.Replicas != replicasOf(&pool) {
		// The decision is the pool's size, as an HPA sets it through the
		// scale subresource; the update's event reconciles again.
		return ctrl.Result{}, r.setReplicas(ctx, &pool, dec.Replicas, describe(dec, st.held, waiting))
	}
	wait, err := r.scale(ctx, &pool, st, dec.Replicas, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	periodic := pool.Spec.Autoscaling != nil || len(st.draining) > 0 || !dec.LowSince.IsZero()
	if periodic && (wait == 0 || wait > pollInterval) {
		wait = pollInterval
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}

// describe says why a decision was taken, for its Event.
func describe(dec Decision, held, waiting int) string {
	return fmt.Sprintf("%s: %d leases held, %d requests waiting", dec.Reason, held, waiting)
}

func replicasOf(p *crawlv1alpha1.ProxyPool) int32 {
	if p.Spec.Replicas == nil {
		return 1
	}
	return *p.Spec.Replicas
}

// serves reports whether a request could be granted one of the pool's
// Proxies: its namespace (or one of those a request without a namespace is
// limited to), and a selector the template's attributes satisfy.
func serves(p *crawlv1alpha1.ProxyPool, q lease.AcquireRequest) bool {
	switch {
	case q.Namespace != "" && q.Namespace != p.Namespace:
		return false
	case q.Namespace == "" && q.Namespaces != nil && !slices.Contains(q.Namespaces, p.Namespace):
		return false
	}
	return crawlv1alpha1.SelectorMatches(q.Selector, p.Spec.Template.Spec.Attributes)
}

func (r *Reconciler) getLowSince(k types.NamespacedName) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lowSince[k]
}

func (r *Reconciler) setLowSince(k types.NamespacedName, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.IsZero() {
		delete(r.lowSince, k)
		return
	}
	if r.lowSince == nil {
		r.lowSince = map[types.NamespacedName]time.Time{}
	}
	r.lowSince[k] = t
}
