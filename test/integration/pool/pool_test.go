package pool

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/pool"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

var suite *framework.OperatorSuite

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.InfoLevel)))
	os.Exit(framework.Main(m, "pool", func(ctx context.Context, e *framework.Env) error {
		scheme, err := app.NewScheme()
		if err != nil {
			return err
		}
		suite, err = e.OperatorSuite(ctx, scheme)
		return err
	}))
}

// env is one namespace with the pool controller and a lease store running.
type env struct {
	c      client.Client
	ns     string
	leases *leasing.Leasing
}

func start(t *testing.T, drainTimeout time.Duration) *env {
	t.Helper()
	c, ns := suite.Namespace(t, "pool")
	opts := leasing.DefaultOptions()
	opts.MaxLeasesPerProxy = 1
	store, err := lease.New(opts.StoreOptions(), clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	l := leasing.NewWithStore(store, opts, clock.RealClock{})
	// The operator is bound to its ClusterRole in this namespace only.
	mgr, err := ctrl.NewManager(suite.Operator, ctrl.Options{Scheme: suite.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		// One manager per test in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inf, err := mgr.GetCache().GetInformer(ctx, &crawlv1alpha1.Proxy{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(lease.NewProxySync(l.Store)); err != nil {
		t.Fatal(err)
	}
	for _, r := range l.Runnables() {
		if err := mgr.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	r := &pool.Reconciler{Client: mgr.GetClient(), Demand: l, Options: pool.Options{DrainTimeout: drainTimeout},
		Recorder: mgr.GetEventRecorder("proxy-operator")}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return &env{c: c, ns: ns, leases: l}
}

func (e *env) newPool(t *testing.T, name string, replicas int32, auto *crawlv1alpha1.PoolAutoscaling) *crawlv1alpha1.ProxyPool {
	t.Helper()
	p := builders.ProxyPool(e.ns, name).Replicas(replicas).
		Template(builders.Proxy("", "").Provider("kubernetes").Label("team", "crawl").Attr("pool", name).Attr("tier", "standard")).Obj()
	p.Spec.Autoscaling = auto
	if err := e.c.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// proxies are the pool's Proxies as the API has them now (not deleting).
func (e *env) proxies(t *testing.T, poolName string) []crawlv1alpha1.Proxy {
	t.Helper()
	var list crawlv1alpha1.ProxyList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns), client.MatchingLabels{crawlv1alpha1.PoolLabel: poolName}); err != nil {
		t.Fatal(err)
	}
	var out []crawlv1alpha1.Proxy
	for _, p := range list.Items {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	return out
}

func (e *env) waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: not within %s", what, within)
	}
}

func (e *env) waitCount(t *testing.T, poolName string, n int) []crawlv1alpha1.Proxy {
	t.Helper()
	var got []crawlv1alpha1.Proxy
	e.waitFor(t, fmt.Sprintf("pool %s at %d proxies", poolName, n), 30*time.Second, func() bool {
		got = e.proxies(t, poolName)
		return len(got) == n
	})
	return got
}

// markReady plays the Proxy reconciler: provisioned, healthy, an address.
func (e *env) markReady(t *testing.T, ps []crawlv1alpha1.Proxy) {
	t.Helper()
	for i := range ps {
		p := ps[i].DeepCopy()
		if meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionHealthy) {
			continue
		}
		orig := p.DeepCopy()
		now := metav1.Now()
		p.Status.Phase = crawlv1alpha1.PhaseReady
		p.Status.IP = fmt.Sprintf("127.0.40.%d", 2+i)
		p.Status.Conditions = []metav1.Condition{
			{Type: crawlv1alpha1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonCreated, LastTransitionTime: now},
			{Type: crawlv1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonProbeSucceeded, LastTransitionTime: now},
		}
		if err := e.c.Status().Patch(context.Background(), p, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
}

func (e *env) getPool(t *testing.T, name string) *crawlv1alpha1.ProxyPool {
	t.Helper()
	var p crawlv1alpha1.ProxyPool
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// scale sets the size through the scale subresource, as `kubectl scale`.
func (e *env) scale(t *testing.T, p *crawlv1alpha1.ProxyPool, n int32) {
	t.Helper()
	sc := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
	if err := e.c.SubResource("scale").Update(context.Background(), e.getPool(t, p.Name), client.WithSubResourceBody(sc)); err != nil {
		t.Fatalf("scaling %s to %d: %v", p.Name, n, err)
	}
}

func TestCreateAndScale(t *testing.T) {
	e := start(t, time.Minute)
	p := e.newPool(t, "web", 3, nil)
	got := e.waitCount(t, "web", 3)
	for _, px := range got {
		ref := metav1.GetControllerOf(&px)
		if ref == nil || ref.UID != p.UID || px.Labels["team"] != "crawl" || px.Spec.Attributes["pool"] != "web" || px.Spec.Provider != "kubernetes" {
			t.Errorf("proxy %s: owner %v, labels %v, attributes %v", px.Name, ref, px.Labels, px.Spec.Attributes)
		}
	}
	e.waitFor(t, "status of 3", 10*time.Second, func() bool {
		s := e.getPool(t, "web").Status
		return s.Replicas == 3 && s.DesiredReplicas == 3 && s.Selector == crawlv1alpha1.PoolLabel+"=web" && s.ObservedGeneration > 0
	})
	e.markReady(t, got)
	e.waitFor(t, "3 ready", 10*time.Second, func() bool { return e.getPool(t, "web").Status.ReadyReplicas == 3 })

	e.scale(t, p, 5)
	e.waitCount(t, "web", 5)
	e.scale(t, p, 1)
	e.waitCount(t, "web", 1)
	// Stays there (no flapping, no extra creates).
	time.Sleep(1500 * time.Millisecond)
	if n := len(e.proxies(t, "web")); n != 1 {
		t.Errorf("%d proxies a while after scaling to 1", n)
	}
	cond := meta.FindStatusCondition(e.getPool(t, "web").Status.Conditions, crawlv1alpha1.ConditionScaled)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Scaled condition %+v, want True", cond)
	}
}

// Scale-down never deletes a leased Proxy before it drains: it is marked
// draining, the store grants it nothing new, its lease renews and, released,
// the Proxy goes.
func TestScaleDownDrainsLeasedProxies(t *testing.T) {
	e := start(t, time.Hour)
	p := e.newPool(t, "drain", 3, nil)
	e.markReady(t, e.waitCount(t, "drain", 3))
	ctx := context.Background()
	sel := map[string]string{"pool": "drain"}
	var held *lease.Lease
	e.waitFor(t, "a lease on the pool", 10*time.Second, func() bool {
		l, err := e.leases.Store.Acquire(lease.AcquireRequest{Namespace: e.ns, Selector: sel, Holder: "crawler", TTL: 10 * time.Minute})
		held = l
		return err == nil
	})
	e.scale(t, p, 0)
	// The two unleased go; the leased one drains.
	var left []crawlv1alpha1.Proxy
	e.waitFor(t, "the leased proxy alone, draining", 20*time.Second, func() bool {
		left = e.proxies(t, "drain")
		return len(left) == 1 && left[0].Annotations[crawlv1alpha1.DrainingAnnotation] != ""
	})
	if left[0].Name != held.Proxy.Name {
		t.Fatalf("kept %s, but the lease is on %s", left[0].Name, held.Proxy.Name)
	}
	e.waitFor(t, "the store sees the proxy draining", 10*time.Second, func() bool {
		l, ok := e.leases.Store.Get(held.ID)
		return ok && l.Proxy.Draining
	})
	if _, err := e.leases.Store.Acquire(lease.AcquireRequest{Namespace: e.ns, Selector: sel, Holder: "other"}); !lease.IsNoMatch(err) {
		t.Errorf("a new lease on a draining proxy: %v", err)
	}
	if _, err := e.leases.Store.RenewAs("crawler", held.ID, 10*time.Minute); err != nil {
		t.Errorf("renew on a draining proxy: %v", err)
	}
	time.Sleep(3 * time.Second) // several polls: still there while leased
	if n := len(e.proxies(t, "drain")); n != 1 {
		t.Fatalf("the leased proxy was deleted before it drained (%d left)", n)
	}
	if s := e.getPool(t, "drain").Status; s.DrainingReplicas != 1 || s.LeasedReplicas != 1 {
		t.Errorf("status draining %d leased %d, want 1 and 1", s.DrainingReplicas, s.LeasedReplicas)
	}
	e.leases.Store.Release(held.ID)
	e.waitCount(t, "drain", 0)
	_ = ctx
}

// A drain that outlasts --pool-drain-timeout ends with the Proxy deleted.
func TestDrainTimeout(t *testing.T) {
	e := start(t, 2*time.Second)
	p := e.newPool(t, "slow", 1, nil)
	e.markReady(t, e.waitCount(t, "slow", 1))
	e.waitFor(t, "a lease", 10*time.Second, func() bool {
		_, err := e.leases.Store.Acquire(lease.AcquireRequest{Namespace: e.ns, Selector: map[string]string{"pool": "slow"}, Holder: "h", TTL: time.Hour})
		return err == nil
	})
	began := time.Now()
	e.scale(t, p, 0)
	e.waitCount(t, "slow", 0)
	if took := time.Since(began); took < 2*time.Second {
		t.Errorf("a leased proxy went after %s, before its 2s drain timeout", took)
	}
}

// Autoscaling from zero: 20 requests waiting on an empty pool grow it; each is
// granted once its proxy turns Ready; idle, the pool shrinks back to zero
// after the scale-down delay, with no lease broken.
func TestAutoscaleFromZero(t *testing.T) {
	e := start(t, time.Hour)
	e.newPool(t, "auto", 0, &crawlv1alpha1.PoolAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 30,
		TargetUtilization: ptr.To[int32](100), ScaleDownDelaySeconds: ptr.To[int32](3)})
	svc, err := e.leases.Service(leasing.APIHTTP, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	const waiting = 20
	var wg sync.WaitGroup
	granted := make(chan *lease.Lease, waiting)
	for i := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := svc.Acquire(context.Background(), leasing.Request{
				Namespace: e.ns, Selector: map[string]string{"pool": "auto"}, Identity: leasing.KubernetesIdentity(fmt.Sprintf("c%d", i)), TTL: 10 * time.Minute,
				Wait: 45 * time.Second})
			if err != nil {
				t.Errorf("waiting request %d: %v", i, err)
				return
			}
			granted <- l
		}()
	}
	e.waitFor(t, "the waiting requests in the pool's status", 10*time.Second, func() bool {
		return e.getPool(t, "auto").Status.WaitingRequests == waiting
	})
	// The pool grows to the waiting demand; the test readies what appears.
	e.waitFor(t, "the pool grown to the waiting requests", 30*time.Second, func() bool {
		ps := e.proxies(t, "auto")
		e.markReady(t, ps)
		return len(ps) == waiting
	})
	wg.Wait()
	close(granted)
	var leases []*lease.Lease
	proxies := map[string]bool{}
	for l := range granted {
		leases = append(leases, l)
		proxies[l.Proxy.Name] = true
	}
	if len(leases) != waiting || len(proxies) != waiting {
		t.Fatalf("%d grants on %d proxies, want %d on %d", len(leases), len(proxies), waiting, waiting)
	}
	if s := e.getPool(t, "auto"); *s.Spec.Replicas != waiting || s.Status.DesiredReason != crawlv1alpha1.DesiredDemand {
		t.Errorf("spec.replicas %d, desired reason %q", *s.Spec.Replicas, s.Status.DesiredReason)
	}
	// The decision is an Event on the pool.
	e.waitFor(t, "a Scaled event", 10*time.Second, func() bool {
		var evs eventsv1.EventList
		if err := e.c.List(context.Background(), &evs, client.InNamespace(e.ns)); err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.Regarding.Name == "auto" && ev.Reason == pool.EventReasonScaled && strings.Contains(ev.Note, "requests waiting") {
				return true
			}
		}
		return false
	})
	// Held, the pool stays; released, it shrinks after the delay.
	time.Sleep(4 * time.Second)
	if n := len(e.proxies(t, "auto")); n != waiting {
		t.Fatalf("%d proxies while all %d are leased", n, waiting)
	}
	for _, l := range leases {
		if _, ok := e.leases.Store.Get(l.ID); !ok {
			t.Errorf("lease %s broken while the pool held", l.ID)
		}
		e.leases.Store.Release(l.ID)
	}
	released := time.Now()
	e.waitCount(t, "auto", 0)
	if took := time.Since(released); took < 3*time.Second {
		t.Errorf("shrank %s after the last release, before the 3s scale-down delay", took)
	}
}

// A labelled Proxy without an owner is adopted (the pool makes one fewer);
// one whose label stops naming the pool is released, and replaced.
func TestAdoptAndRelease(t *testing.T) {
	e := start(t, time.Minute)
	ctx := context.Background()
	orphan := builders.Proxy(e.ns, "orphan").Label(crawlv1alpha1.PoolLabel, "adopt").Provider("kubernetes").Obj()
	if err := e.c.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	p := e.newPool(t, "adopt", 2, nil)
	got := e.waitCount(t, "adopt", 2)
	e.waitFor(t, "the orphan adopted", 10*time.Second, func() bool {
		var o crawlv1alpha1.Proxy
		_ = e.c.Get(ctx, client.ObjectKeyFromObject(orphan), &o)
		ref := metav1.GetControllerOf(&o)
		return ref != nil && ref.UID == p.UID
	})
	var other *crawlv1alpha1.Proxy
	for i := range got {
		if got[i].Name != "orphan" {
			other = &got[i]
		}
	}
	orig := other.DeepCopy()
	other.Labels[crawlv1alpha1.PoolLabel] = "elsewhere"
	if err := e.c.Patch(ctx, other, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "the relabelled proxy released", 10*time.Second, func() bool {
		var o crawlv1alpha1.Proxy
		_ = e.c.Get(ctx, client.ObjectKeyFromObject(other), &o)
		return metav1.GetControllerOf(&o) == nil
	})
	e.waitCount(t, "adopt", 2) // a replacement
}

// A template change rolls the pool: new Proxies first (maxSurge 1), an old
// one retired only once Ready stays at replicas - maxUnavailable (0), a
// leased old one drained with its lease intact.
func TestTemplateChangeRolls(t *testing.T) {
	e := start(t, time.Hour)
	ctx := context.Background()
	e.newPool(t, "roll", 2, nil)
	first := e.waitCount(t, "roll", 2)
	e.markReady(t, first)
	var held *lease.Lease
	e.waitFor(t, "a lease on the pool", 10*time.Second, func() bool {
		l, err := e.leases.Store.Acquire(lease.AcquireRequest{Namespace: e.ns, Selector: map[string]string{"pool": "roll"}, Holder: "h", TTL: time.Hour})
		held = l
		return err == nil
	})
	p := e.getPool(t, "roll")
	orig := p.DeepCopy()
	p.Spec.Template.Spec.Attributes["tier"] = "premium"
	if err := e.c.Patch(ctx, p, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	old := map[string]bool{first[0].Name: true, first[1].Name: true}
	minReady := 2
	e.waitFor(t, "the pool rolled to the new template", 60*time.Second, func() bool {
		ps := e.proxies(t, "roll")
		ready, fresh, draining := 0, 0, 0
		var toReady []crawlv1alpha1.Proxy
		for _, px := range ps {
			if px.Status.Phase == crawlv1alpha1.PhaseReady && px.Annotations[crawlv1alpha1.DrainingAnnotation] == "" {
				ready++
			}
			if px.Annotations[crawlv1alpha1.DrainingAnnotation] != "" {
				draining++
			}
			if !old[px.Name] {
				fresh++
				if px.Spec.Attributes["tier"] != "premium" {
					t.Errorf("new proxy %s has the old template: %v", px.Name, px.Spec.Attributes)
				}
				toReady = append(toReady, px)
			}
		}
		if ready < minReady {
			t.Errorf("%d Ready proxies during the roll, under replicas - maxUnavailable = %d", ready, minReady)
		}
		if len(ps) > 2+1+draining {
			t.Errorf("%d proxies during the roll (%d draining): over replicas + maxSurge", len(ps), draining)
		}
		e.markReady(t, toReady)
		// Done: two new ones; the leased old one drains, the other is gone.
		return fresh == 2 && len(ps) == 3 && draining == 1
	})
	if l, ok := e.leases.Store.Get(held.ID); !ok || !l.Proxy.Draining {
		t.Fatalf("the lease on the old proxy during the roll: %+v %v, want it intact and draining", l, ok)
	}
	e.leases.Store.Release(held.ID)
	e.waitFor(t, "only the new template left", 20*time.Second, func() bool {
		ps := e.proxies(t, "roll")
		for _, px := range ps {
			if old[px.Name] {
				return false
			}
		}
		return len(ps) == 2
	})
}

// An autoscaled pool with minReplicas 0 applied without spec.replicas (its
// default is 1) makes no Proxy while nothing asks for one, and its status
// shows every count, 0 included (kubectl's LEASED column is 0, not empty).
func TestAutoscaledPoolStartsEmpty(t *testing.T) {
	e := start(t, time.Minute)
	ctx := context.Background()
	// No replicas: the CRD's default (1) is what this test is about.
	p := builders.ProxyPool(e.ns, "idle").Template(builders.Proxy("", "").Provider("kubernetes").Attr("pool", "idle")).
		Autoscaling(0, 3).Obj()
	if err := e.c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Replicas == nil || *p.Spec.Replicas != 1 {
		t.Fatalf("spec.replicas defaulted to %v, want the CRD's 1 (the case this test is about)", p.Spec.Replicas)
	}
	e.waitFor(t, "spec.replicas set to 0 by the autoscaler", 10*time.Second, func() bool {
		got := e.getPool(t, "idle")
		return got.Spec.Replicas != nil && *got.Spec.Replicas == 0 && got.Status.ObservedGeneration == got.Generation
	})
	// Give a wrongly created Proxy time to show.
	time.Sleep(2 * time.Second)
	if ps := e.proxies(t, "idle"); len(ps) != 0 {
		t.Errorf("an idle autoscaled pool made %d Proxies, want none", len(ps))
	}
	var u unstructured.Unstructured
	u.SetGroupVersionKind(crawlv1alpha1.SchemeGroupVersion.WithKind("ProxyPool"))
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), &u); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"replicas", "readyReplicas", "leasedReplicas", "drainingReplicas", "waitingRequests", "desiredReplicas"} {
		if v, found, err := unstructured.NestedInt64(u.Object, "status", f); err != nil || !found || v != 0 {
			t.Errorf("status.%s = (%d, found %v, %v), want 0 written", f, v, found, err)
		}
	}
}
