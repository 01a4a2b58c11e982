package proxylease

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/leasing/leasingtest"
)

var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	t      testing.TB
	clock  *clocktesting.FakeClock
	store  *lease.Store
	queue  *leasingtest.Queue
	rec    *outcomes
	rest   *REST
	report *ReportREST
	cache  *leaseCache
}

func newFixture(t testing.TB, opts lease.Options, proxies ...lease.ProxyInfo) *fixture {
	t.Helper()
	clk := clocktesting.NewFakeClock(epoch)
	store, err := lease.New(opts, clk)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		store.UpsertProxy(p)
	}
	q, rec := &leasingtest.Queue{Store: store}, &outcomes{}
	svc, err := leasing.NewService(leasing.APIKubernetes, 30*time.Second, leasing.ServiceDeps{Store: store, Queue: q, Clock: clk, Recorder: rec,
		Priorities: leasing.PriorityGrants{"user:carol": 5}})
	if err != nil {
		t.Fatal(err)
	}
	cache, closeCache := newLeaseCache(svc, clk, 64)
	t.Cleanup(closeCache)
	return &fixture{
		t: t, clock: clk, store: store, queue: q, rec: rec, cache: cache,
		rest: &REST{
			svc: svc, cache: cache, names: names.SimpleNameGenerator,
			table: tableConvertor{clock: clk},
		},
		report: &ReportREST{svc: svc},
	}
}

func proxy(ns, name string, attrs map[string]string) lease.ProxyInfo {
	return lease.ProxyInfo{
		Namespace: ns, Name: name, URL: "http://127.0.0.9:3128", Host: "127.0.0.9", Port: 3128,
		Attributes: attrs, LatencyMillis: 12, Healthy: true,
	}
}

func ctxFor(ns, userName string) context.Context {
	ctx := genericapirequest.WithNamespace(context.Background(), ns)
	return genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: userName})
}

func newLease(name string, mutate ...func(*leasingv1alpha1.ProxyLease)) *leasingv1alpha1.ProxyLease {
	pl := &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, m := range mutate {
		m(pl)
	}
	return pl
}

func (f *fixture) create(ctx context.Context, pl *leasingv1alpha1.ProxyLease) (*leasingv1alpha1.ProxyLease, error) {
	obj, err := f.rest.Create(ctx, pl, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*leasingv1alpha1.ProxyLease), nil
}

func (f *fixture) mustCreate(ctx context.Context, pl *leasingv1alpha1.ProxyLease) *leasingv1alpha1.ProxyLease {
	f.t.Helper()
	out, err := f.create(ctx, pl)
	if err != nil {
		f.t.Fatalf("create %s: %v", pl.Name, err)
	}
	return out
}

func TestCreateAcquiresAndFillsStatusAndMetadata(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("team-a", "px-1", map[string]string{"region": "eu"}))
	pl := newLease("crawl-1", func(pl *leasingv1alpha1.ProxyLease) {
		pl.Labels = map[string]string{"app": "crawler"}
		pl.Spec.Selector = map[string]string{"region": "eu"}
		pl.Spec.Target = "example.com"
		pl.Spec.TTLSeconds = ptr.To[int32](60)
		pl.Status.HolderIdentity = "forged" // status is the server's
	})
	got := f.mustCreate(ctxFor("team-a", "alice"), pl)

	if got.UID == "" || got.ResourceVersion == "" || got.CreationTimestamp.IsZero() {
		t.Errorf("system metadata not filled: uid=%q rv=%q created=%v", got.UID, got.ResourceVersion, got.CreationTimestamp)
	}
	want := leasingv1alpha1.ProxyLeaseStatus{
		LeaseID:        got.Status.LeaseID,
		HolderIdentity: "alice",
		AcquireTime:    &metav1.Time{Time: epoch},
		ExpireTime:     &metav1.Time{Time: epoch.Add(time.Minute)},
		Proxy: &leasingv1alpha1.LeasedProxy{
			Name: "px-1", URL: "http://127.0.0.9:3128", Host: "127.0.0.9", Port: 3128,
			Attributes: map[string]string{"region": "eu"}, LatencyMillis: ptr.To[int64](12),
		},
		Conditions: []metav1.Condition{{Type: leasingv1alpha1.ConditionProxyHealthy, Status: metav1.ConditionTrue,
			Reason: leasingv1alpha1.ReasonProxyHealthy, Message: "the proxy passes its health probes", LastTransitionTime: metav1.Time{Time: epoch}}},
	}
	if diff := cmp.Diff(want, got.Status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if got.Name != "crawl-1" || got.Namespace != "team-a" || got.Labels["app"] != "crawler" {
		t.Errorf("metadata = %s/%s labels %v", got.Namespace, got.Name, got.Labels)
	}
	l, ok := f.store.Get(got.Status.LeaseID)
	if !ok || l.Name != "crawl-1" || l.Holder != "alice" || l.Flow != "alice" || l.Target != "example.com" {
		t.Errorf("store lease = %+v, %v", l, ok)
	}
	// The same object comes back from Get, with the same resourceVersion.
	again, err := f.rest.Get(ctxFor("team-a", "bob"), "crawl-1", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("get differs from create (-create +get):\n%s", diff)
	}
}

func TestCreateNames(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")

	gen := f.mustCreate(ctx, newLease("", func(pl *leasingv1alpha1.ProxyLease) { pl.GenerateName = "crawler-" }))
	// generateName + the lease ID, so that a signed ID in it proves the lease.
	if gen.Name != "crawler-"+gen.Status.LeaseID || gen.Status.LeaseID == "" {
		t.Errorf("generateName crawler- gave %q (lease ID %q)", gen.Name, gen.Status.LeaseID)
	}
	anon := f.mustCreate(ctx, newLease(""))
	if !strings.HasPrefix(anon.Name, "lease-") {
		t.Errorf("unnamed lease got name %q, want a server-generated lease-*", anon.Name)
	}
	f.mustCreate(ctx, newLease("fixed"))
	_, err := f.create(ctx, newLease("fixed"))
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create of the same name: %v, want AlreadyExists", err)
	}
	// Negative control: the same name in another namespace is another lease.
	f.store.UpsertProxy(proxy("other", "px", nil))
	if _, err := f.create(ctxFor("other", "u"), newLease("fixed")); err != nil {
		t.Errorf("same name in another namespace: %v", err)
	}
}

// collidingNames always generates the same name, to exercise the retry.
type collidingNames struct{ n int }

func (c *collidingNames) GenerateName(base string) string {
	c.n++
	if c.n < 3 {
		return base + "taken"
	}
	return base + "free"
}

func TestCreateRetriesGeneratedNameCollision(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	// A prefix too long to carry an ID gets kube's kind of generated name.
	prefix := strings.Repeat("x", maxPrefixForID) + "-"
	f.mustCreate(ctx, newLease(prefix+"taken"))
	f.rest.names = &collidingNames{}
	got := f.mustCreate(ctx, newLease("", func(pl *leasingv1alpha1.ProxyLease) { pl.GenerateName = prefix }))
	if got.Name != prefix+"free" {
		t.Errorf("name = %q, want %sfree after a collision", got.Name, prefix)
	}
}

func TestCreateDryRunAcquiresNothing(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	obj, err := f.rest.Create(ctxFor("ns", "u"), newLease("dry"), rest.ValidateAllObjectFunc,
		&metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*leasingv1alpha1.ProxyLease)
	if got.Spec.TTLSeconds == nil || *got.Spec.TTLSeconds != leasingv1alpha1.DefaultTTLSeconds || got.Status.Proxy != nil {
		t.Errorf("dry-run object: ttl %v proxy %v, want the default TTL and no proxy", got.Spec.TTLSeconds, got.Status.Proxy)
	}
	if n := len(f.store.List("")); n != 0 {
		t.Errorf("dry run left %d leases in the store", n)
	}
	// Negative control: the same request without dry run does acquire.
	f.mustCreate(ctxFor("ns", "u"), newLease("dry"))
	if n := len(f.store.List("")); n != 1 {
		t.Errorf("real create left %d leases, want 1", n)
	}
}

func TestCreateValidation(t *testing.T) {
	tests := []struct {
		name   string
		lease  *leasingv1alpha1.ProxyLease
		fields []string
	}{
		{"ttl zero", newLease("a", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.TTLSeconds = ptr.To[int32](0) }), []string{"spec.ttlSeconds"}},
		{"ttl over max", newLease("a", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.TTLSeconds = ptr.To[int32](3601) }), []string{"spec.ttlSeconds"}},
		{"wait over the maximum", newLease("a", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.WaitSeconds = 31 }), []string{"spec.waitSeconds"}},
		{"negative wait", newLease("a", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.WaitSeconds = -1 }), []string{"spec.waitSeconds"}},
		{"target with space", newLease("a", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Target = "a b" }), []string{"spec.target"}},
		{"empty selector key", newLease("a", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Selector = map[string]string{"": "x"} }), []string{"spec.selector"}},
		{"bad name", newLease("Not_A_Name"), []string{"metadata.name"}},
		{"finalizers", newLease("a", func(pl *leasingv1alpha1.ProxyLease) { pl.Finalizers = []string{"x/y"} }), []string{"metadata.finalizers"}},
		{"two at once", newLease("a", func(pl *leasingv1alpha1.ProxyLease) {
			pl.Spec.TTLSeconds = ptr.To[int32](-5)
			pl.Spec.Target = strings.Repeat("x", 300)
		}), []string{"spec.target", "spec.ttlSeconds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
			_, err := f.create(ctxFor("ns", "u"), tt.lease)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("err = %v, want 422 Invalid", err)
			}
			var got []string
			for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
				got = append(got, c.Field)
			}
			if diff := cmp.Diff(tt.fields, sortedUnique(got)); diff != "" {
				t.Errorf("fields (-want +got):\n%s\nmessage: %v", diff, err)
			}
			if n := len(f.store.List("")); n != 0 {
				t.Errorf("invalid create acquired %d leases", n)
			}
		})
	}
}

func sortedUnique(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slicesSort(out)
	return out
}

func TestNamespaceIsolation(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 5}, proxy("team-a", "px-a", nil))
	_, err := f.create(ctxFor("team-b", "u"), newLease("b1"))
	if !apierrors.IsConflict(err) {
		t.Fatalf("lease in team-b with proxies only in team-a: %v, want 409", err)
	}
	got := f.mustCreate(ctxFor("team-a", "u"), newLease("a1"))
	if got.Status.Proxy.Name != "px-a" {
		t.Errorf("team-a lease got proxy %q", got.Status.Proxy.Name)
	}
	f.store.UpsertProxy(proxy("team-b", "px-b", nil))
	for i := 0; i < 4; i++ {
		b := f.mustCreate(ctxFor("team-b", "u"), newLease("", func(pl *leasingv1alpha1.ProxyLease) { pl.GenerateName = "b-" }))
		if b.Status.Proxy.Name != "px-b" {
			t.Errorf("team-b lease %s got proxy %q, want px-b", b.Name, b.Status.Proxy.Name)
		}
	}
	// Reads are namespaced too.
	list, err := f.rest.List(ctxFor("team-a", "u"), &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if items := list.(*leasingv1alpha1.ProxyLeaseList).Items; len(items) != 1 || items[0].Name != "a1" {
		t.Errorf("team-a list = %v", leaseNames(items))
	}
	if _, err := f.rest.Get(ctxFor("team-b", "u"), "a1", nil); !apierrors.IsNotFound(err) {
		t.Errorf("get team-a's lease from team-b: %v, want NotFound", err)
	}
	all, _ := f.rest.List(ctxFor("", "u"), &metainternalversion.ListOptions{})
	if n := len(all.(*leasingv1alpha1.ProxyLeaseList).Items); n != 5 {
		t.Errorf("all-namespaces list has %d items, want 5", n)
	}
}

func TestCreateRefusesAProxyOfAnotherNamespace(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("team-a", "px-a", nil))
	f.queue.Mutate = func(r *lease.AcquireRequest) { r.Namespace = "" } // a queue that wrongly grants another namespace's proxy
	_, err := f.create(ctxFor("team-b", "u"), newLease("b1"))
	if err == nil || !apierrors.IsInternalError(err) {
		t.Fatalf("err = %v, want an internal error", err)
	}
	if calls := f.queue.Calls(); len(calls) != 1 || len(f.store.List("")) != 0 {
		t.Errorf("the wrongly granted lease was not released: calls %v, live %d", calls, len(f.store.List("")))
	}
}

func TestNoMatchStatusNamesTheCounts(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px-1", map[string]string{"r": "eu"}), proxy("ns", "px-2", map[string]string{"r": "eu"}))
	unhealthy := proxy("ns", "px-3", map[string]string{"r": "eu"})
	unhealthy.Healthy = false
	f.store.UpsertProxy(unhealthy)
	ctx := ctxFor("ns", "u")
	sel := func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Selector = map[string]string{"r": "eu"} }
	f.mustCreate(ctx, newLease("l1", sel))
	f.mustCreate(ctx, newLease("l2", sel))
	_, err := f.create(ctx, newLease("l3", sel))
	if !apierrors.IsConflict(err) {
		t.Fatalf("over capacity: %v, want 409 Conflict", err)
	}
	st := err.(apierrors.APIStatus).Status()
	for _, want := range []string{"considered 3", "at capacity 2", "in cooldown 0", "unhealthy 1", "ns/l3", "{r=eu}"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("message %q lacks %q", st.Message, want)
		}
	}
	causes := map[metav1.CauseType]string{}
	for _, c := range st.Details.Causes {
		causes[c.Type] = c.Message
	}
	want := map[metav1.CauseType]string{
		CauseProxiesConsidered: "3", CauseProxiesAtCapacity: "2", CauseProxiesInCooldown: "0", CauseProxiesUnhealthy: "1",
		CauseProxiesFree: "0", CauseRequestsQueuedAhead: "0",
	}
	if diff := cmp.Diff(want, causes); diff != "" {
		t.Errorf("causes (-want +got):\n%s", diff)
	}
	if _, err := f.rest.Get(ctx, "l3", nil); !apierrors.IsNotFound(err) {
		t.Errorf("a failed create left an object: %v", err)
	}
	// The failed create's name reservation is gone: the name can be used.
	if err := deleteLease(f, ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(ctx, newLease("l3", sel))
}

func deleteLease(f *fixture, ctx context.Context, name string) error {
	_, _, err := f.rest.Delete(ctx, name, rest.ValidateAllObjectFunc, &metav1.DeleteOptions{})
	return err
}

func TestDeleteReleases(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	created := f.mustCreate(ctx, newLease("l"))

	// Dry-run delete keeps it.
	if _, _, err := f.rest.Delete(ctx, "l", nil, &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.store.Get(created.Status.LeaseID); !ok {
		t.Fatal("dry-run delete released the lease")
	}
	// A failed precondition keeps it.
	_, _, err := f.rest.Delete(ctx, "l", nil, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid("nope"))}})
	if !apierrors.IsConflict(err) {
		t.Errorf("delete with a wrong UID precondition: %v, want Conflict", err)
	}
	obj, immediate, err := f.rest.Delete(ctx, "l", nil, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &created.UID}})
	if err != nil || !immediate || obj.(*leasingv1alpha1.ProxyLease).Name != "l" {
		t.Fatalf("delete = %v, %v, %v", obj, immediate, err)
	}
	if _, ok := f.store.Get(created.Status.LeaseID); ok {
		t.Error("delete did not release the lease")
	}
	if err := deleteLease(f, ctx, "l"); !apierrors.IsNotFound(err) {
		t.Errorf("second delete: %v, want NotFound", err)
	}
	// The proxy is free again.
	f.mustCreate(ctx, newLease("next"))
}

func TestDeleteCollection(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	for _, n := range []string{"a", "b", "c"} {
		f.mustCreate(ctx, newLease(n, func(pl *leasingv1alpha1.ProxyLease) {
			pl.Labels = map[string]string{"keep": map[bool]string{true: "yes", false: "no"}[n == "b"]}
		}))
	}
	sel := labels.SelectorFromSet(labels.Set{"keep": "no"})
	out, err := f.rest.DeleteCollection(ctx, nil, &metav1.DeleteOptions{}, &metainternalversion.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if got := leaseNames(out.(*leasingv1alpha1.ProxyLeaseList).Items); !cmp.Equal(got, []string{"a", "c"}) {
		t.Errorf("deleted %v, want [a c]", got)
	}
	left := f.store.List("ns")
	if len(left) != 1 || left[0].Name != "b" {
		t.Errorf("left %v, want only b", left)
	}
}

func TestUpdateRenews(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	created := f.mustCreate(ctx, newLease("l", func(pl *leasingv1alpha1.ProxyLease) {
		pl.Spec.TTLSeconds = ptr.To[int32](60)
		pl.Spec.Target = "example.com"
	}))
	f.clock.Step(30 * time.Second)

	patch := func(mutate func(*leasingv1alpha1.ProxyLease)) (*leasingv1alpha1.ProxyLease, error) {
		obj, _, err := f.rest.Update(ctx, "l", rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, newObj, old runtime.Object) (runtime.Object, error) {
			pl := old.(*leasingv1alpha1.ProxyLease).DeepCopy()
			pl.ResourceVersion = "" // a merge patch carries none
			mutate(pl)
			return pl, nil
		}), nil, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*leasingv1alpha1.ProxyLease), nil
	}
	renewed, err := patch(func(pl *leasingv1alpha1.ProxyLease) {
		pl.Spec.TTLSeconds = ptr.To[int32](600)
		pl.Labels = map[string]string{"renewed": "yes"}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := epoch.Add(30*time.Second + 10*time.Minute); !renewed.Status.ExpireTime.Time.Equal(want) {
		t.Errorf("expireTime = %v, want %v", renewed.Status.ExpireTime, want)
	}
	if renewed.ResourceVersion == created.ResourceVersion || renewed.Labels["renewed"] != "yes" || renewed.UID != created.UID {
		t.Errorf("renewed object: rv %s (was %s), labels %v, uid %s (was %s)",
			renewed.ResourceVersion, created.ResourceVersion, renewed.Labels, renewed.UID, created.UID)
	}
	// An update with the TTL unchanged renews too.
	f.clock.Step(time.Minute)
	again, err := patch(func(*leasingv1alpha1.ProxyLease) {})
	if err != nil {
		t.Fatal(err)
	}
	if want := epoch.Add(90*time.Second + 10*time.Minute); !again.Status.ExpireTime.Time.Equal(want) {
		t.Errorf("expireTime after a no-op update = %v, want %v", again.Status.ExpireTime, want)
	}

	for name, mutate := range map[string]func(*leasingv1alpha1.ProxyLease){
		"target":    func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Target = "other.com" },
		"selector":  func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Selector = map[string]string{"a": "b"} },
		"selectors": func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Selectors = []map[string]string{{"a": "b"}} },
		"ttl":       func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.TTLSeconds = ptr.To[int32](0) },
	} {
		if _, err := patch(mutate); !apierrors.IsInvalid(err) {
			t.Errorf("changing %s: %v, want Invalid", name, err)
		}
	}
	_, err = patch(func(pl *leasingv1alpha1.ProxyLease) { pl.ResourceVersion = created.ResourceVersion })
	if !apierrors.IsConflict(err) {
		t.Errorf("update with a stale resourceVersion: %v, want Conflict", err)
	}
	cur, _ := f.rest.Get(ctx, "l", nil)
	if cur.(*leasingv1alpha1.ProxyLease).Labels["renewed"] != "yes" || cur.(*leasingv1alpha1.ProxyLease).Spec.Target != "example.com" {
		t.Errorf("a rejected update changed the lease: %+v", cur)
	}
}

// A ProxyLease with a ladder is granted on the tier the store climbs to,
// shows it in status.tier, keeps spec.selectors, and renews as any other
// (the ladder unchanged, the tier kept).
func TestLadderLeaseShowsAndKeepsItsTier(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "cheap", map[string]string{"tier": "cheap"}), proxy("ns", "premium", map[string]string{"tier": "premium"}))
	ctx := ctxFor("ns", "u")
	f.store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "cheap", URL: "http://127.0.0.9:3128", Host: "127.0.0.9", Port: 3128,
		Attributes: map[string]string{"tier": "cheap"}}) // unhealthy: the tier cannot serve
	ladder := []map[string]string{{"tier": "cheap"}, {"tier": "premium"}}
	created := f.mustCreate(ctx, newLease("l", func(pl *leasingv1alpha1.ProxyLease) {
		pl.Spec.TTLSeconds = ptr.To[int32](60)
		pl.Spec.Target = "example.com"
		pl.Spec.Selectors = ladder
	}))
	if created.Status.Tier != 1 || created.Status.Proxy.Name != "premium" || !reflect.DeepEqual(created.Spec.Selectors, ladder) {
		t.Fatalf("created: tier %d on %s, selectors %v; want tier 1 on premium, the ladder kept", created.Status.Tier, created.Status.Proxy.Name, created.Spec.Selectors)
	}
	obj, _, err := f.rest.Update(ctx, "l", rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
		pl := old.(*leasingv1alpha1.ProxyLease).DeepCopy()
		pl.ResourceVersion = ""
		pl.Spec.TTLSeconds = ptr.To[int32](120)
		return pl, nil
	}), nil, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("renewing a ladder lease: %v", err)
	}
	if pl := obj.(*leasingv1alpha1.ProxyLease); pl.Status.Tier != 1 || !reflect.DeepEqual(pl.Spec.Selectors, ladder) {
		t.Errorf("renewed: tier %d, selectors %v", pl.Status.Tier, pl.Spec.Selectors)
	}
}

func TestExpiredLeaseIsGoneButReportable(t *testing.T) {
	f := newFixture(t, lease.Options{CooldownWindow: 5 * time.Minute}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	f.mustCreate(ctx, newLease("l", func(pl *leasingv1alpha1.ProxyLease) {
		pl.Spec.TTLSeconds = ptr.To[int32](10)
		pl.Spec.Target = "example.com"
	}))
	f.clock.Step(10 * time.Second)
	if _, err := f.rest.Get(ctx, "l", nil); !apierrors.IsNotFound(err) {
		t.Fatalf("get after expiry: %v, want NotFound", err)
	}
	// Within the cooldown window the lease still takes a report.
	if _, err := f.reportOn(ctx, "l", leasingv1alpha1.ResultRateLimited, ""); err != nil {
		t.Fatalf("report after expiry: %v", err)
	}
	// The report put (px, example.com) in cooldown: a new lease for that target finds nothing.
	_, err := f.create(ctx, newLease("l2", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Target = "example.com" }))
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "in cooldown 1") {
		t.Errorf("lease for the cooling target: %v, want 409 naming the cooldown", err)
	}
	// Negative control: another target is fine.
	f.mustCreate(ctx, newLease("l3", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Target = "other.org" }))
	f.clock.Step(6 * time.Minute)
	if _, err := f.reportOn(ctx, "l", leasingv1alpha1.ResultOK, ""); !apierrors.IsNotFound(err) {
		t.Errorf("report after the window: %v, want NotFound", err)
	}
}

func (f *fixture) reportOn(ctx context.Context, name string, result leasingv1alpha1.ReportResult, target string) (*metav1.Status, error) {
	obj, err := f.report.Create(ctx, name, &leasingv1alpha1.ProxyLeaseReport{Result: result, Target: target},
		rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*metav1.Status), nil
}

func TestReport(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	created := f.mustCreate(ctx, newLease("l"))

	st, err := f.reportOn(ctx, "l", leasingv1alpha1.ResultOK, "example.com")
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != metav1.StatusSuccess || !strings.Contains(st.Message, "ok") {
		t.Errorf("status = %+v", st)
	}
	got, _ := f.rest.Get(ctx, "l", nil)
	if r := got.(*leasingv1alpha1.ProxyLease).Status.LastResult; r != leasingv1alpha1.ResultOK {
		t.Errorf("lastResult = %q", r)
	}
	if _, err := f.reportOn(ctx, "l", "great", ""); !apierrors.IsInvalid(err) {
		t.Errorf("bad result: %v, want Invalid", err)
	}
	if _, err := f.reportOn(ctx, "nope", leasingv1alpha1.ResultOK, ""); !apierrors.IsNotFound(err) {
		t.Errorf("unknown lease: %v, want NotFound", err)
	}
	if _, err := f.reportOn(ctxFor("elsewhere", "u"), "l", leasingv1alpha1.ResultOK, ""); !apierrors.IsNotFound(err) {
		t.Errorf("report from another namespace: %v, want NotFound", err)
	}
	_, err = f.report.Create(ctx, "l", &leasingv1alpha1.ProxyLeaseReport{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Result: "ok"}, nil, nil)
	if !apierrors.IsBadRequest(err) {
		t.Errorf("report whose name differs from the lease: %v, want BadRequest", err)
	}
	// Dry run records nothing.
	obj, err := f.report.Create(ctx, "l", &leasingv1alpha1.ProxyLeaseReport{Result: leasingv1alpha1.ResultBanned}, nil,
		&metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || !strings.Contains(obj.(*metav1.Status).Message, "dry run") {
		t.Fatalf("dry-run report: %v, %v", obj, err)
	}
	if l, _ := f.store.Get(created.Status.LeaseID); l.LastResult != lease.ResultOK {
		t.Errorf("dry-run report changed lastResult to %q", l.LastResult)
	}
}

func TestLeaseMadeOverHTTPIsListed(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	l, err := f.store.Acquire(lease.AcquireRequest{Namespace: "ns", Target: "t.example", Holder: "token:crawler-7", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	list, err := f.rest.List(ctxFor("ns", "u"), &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items := list.(*leasingv1alpha1.ProxyLeaseList).Items
	if len(items) != 1 {
		t.Fatalf("list has %d items", len(items))
	}
	got := items[0]
	if got.Name != l.ID || got.Status.LeaseID != l.ID || got.Status.HolderIdentity != "token:crawler-7" ||
		got.Spec.Target != "t.example" || *got.Spec.TTLSeconds != 60 || got.UID != uidFor(l.ID) {
		t.Errorf("HTTP lease rendered as %+v", got)
	}
	// A Kubernetes user may not release it: it is the token's.
	if err := deleteLease(f, ctxFor("ns", "u"), l.ID); !apierrors.IsForbidden(err) {
		t.Fatalf("another user's delete of the HTTP lease: %v, want 403", err)
	}
	if _, ok := f.store.Get(l.ID); !ok {
		t.Error("another user's delete released the HTTP lease")
	}
}

func TestListSelectors(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	f.mustCreate(ctx, newLease("a", func(pl *leasingv1alpha1.ProxyLease) {
		pl.Labels = map[string]string{"team": "x"}
		pl.Spec.Target = "a.com"
	}))
	f.mustCreate(ctx, newLease("b", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.Target = "b.com" }))
	tests := []struct {
		name string
		opts *metainternalversion.ListOptions
		want []string
	}{
		{"all", &metainternalversion.ListOptions{}, []string{"a", "b"}},
		{"label", &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"team": "x"})}, []string{"a"}},
		{"metadata.name", &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "b")}, []string{"b"}},
		{"spec.target", &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.target", "a.com")}, []string{"a"}},
		{"holder", &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.holderIdentity", "nobody")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := f.rest.List(ctx, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, leaseNames(list.(*leasingv1alpha1.ProxyLeaseList).Items)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func leaseNames(items []leasingv1alpha1.ProxyLease) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Name)
	}
	return out
}

func TestTable(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px-1", nil))
	ctx := ctxFor("ns", "alice")
	f.mustCreate(ctx, newLease("l", func(pl *leasingv1alpha1.ProxyLease) {
		pl.Spec.Target = "example.com"
		pl.Spec.TTLSeconds = ptr.To[int32](300)
	}))
	f.clock.Step(time.Minute)
	list, _ := f.rest.List(ctx, &metainternalversion.ListOptions{})
	table, err := f.rest.ConvertToTable(ctx, list, &metav1.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"Name", "Proxy", "Target", "Holder", "Expires", "Age"}, cols); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows", len(table.Rows))
	}
	got := table.Rows[0].Cells[:6]
	if diff := cmp.Diff([]any{"l", "px-1", "example.com", "alice", "4m", "60s"}, got); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}
	noHeaders, _ := f.rest.ConvertToTable(ctx, list, &metav1.TableOptions{NoHeaders: true})
	if len(noHeaders.ColumnDefinitions) != 0 || len(noHeaders.Rows) != 1 {
		t.Errorf("NoHeaders table: %d columns, %d rows", len(noHeaders.ColumnDefinitions), len(noHeaders.Rows))
	}
	if _, err := f.rest.ConvertToTable(ctx, &metav1.Status{}, nil); err == nil {
		t.Error("a Status rendered as a ProxyLease table")
	}
}

// Every Reason of the leasing Service's vocabulary has its status, mapped in
// statusFor alone.
func TestServiceErrorsMap(t *testing.T) {
	pl := newLease("x", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.TTLSeconds = ptr.To[int32](5) })
	tests := []struct {
		err   error
		check func(error) bool
		text  string
	}{
		{&leasing.Error{Reason: leasing.ReasonAlreadyExists}, apierrors.IsAlreadyExists, "already exists"},
		{&leasing.Error{Reason: leasing.ReasonInvalid, Fields: field.ErrorList{field.Invalid(field.NewPath("ttlSeconds"), 7200, "too long")}},
			apierrors.IsInvalid, "spec.ttlSeconds"},
		{&leasing.Error{Reason: leasing.ReasonNoMatch, Counts: lease.NoMatchError{Considered: 1, AtCapacity: 1}}, apierrors.IsConflict, "at capacity 1"},
		{&leasing.Error{Reason: leasing.ReasonQueueFull, RetryAfter: 2 * time.Second}, apierrors.IsTooManyRequests, "full"},
		{&leasing.Error{Reason: leasing.ReasonNotFound}, apierrors.IsNotFound, "not found"},
		{&leasing.Error{Reason: leasing.ReasonEnded, EndReason: lease.Expired}, apierrors.IsNotFound, "not found"},
		{&leasing.Error{Reason: leasing.ReasonForbidden}, apierrors.IsForbidden, "forbidden"},
		{&leasing.Error{Reason: leasing.ReasonCancelled}, apierrors.IsTimeout, "gave up"},
		{&leasing.Error{Reason: leasing.ReasonShuttingDown}, apierrors.IsServiceUnavailable, "ShuttingDown"},
		{apierrors.NewTooManyRequests("already a status", 3), apierrors.IsTooManyRequests, "already a status"},
		{errors.New("boom"), apierrors.IsInternalError, "boom"},
	}
	for _, tt := range tests {
		if got := leaseStatus(pl, tt.err); !tt.check(got) || !strings.Contains(got.Error(), tt.text) {
			t.Errorf("%v mapped to %v", tt.err, got)
		}
	}
}

// A ProxyLease follows its proxy: the store's ProxyChanged event makes the
// object show the new address and a ProxyHealthy=False condition, and a
// watcher receives it as MODIFIED; a deleted Proxy deletes the lease.
func TestProxyLeaseFollowsItsProxy(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("team-a", "px-1", map[string]string{"region": "eu"}))
	ctx := ctxFor("team-a", "alice")
	got := f.mustCreate(ctx, newLease("crawl-1"))
	w, err := f.rest.Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: got.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	f.store.UpsertProxy(lease.ProxyInfo{Namespace: "team-a", Name: got.Status.Proxy.Name, URL: "http://127.0.0.99:3128",
		Host: "127.0.0.99", Port: 3128, Attributes: got.Status.Proxy.Attributes, Healthy: false})
	ev := nextWatchEvent(t, w)
	pl := ev.Object.(*leasingv1alpha1.ProxyLease)
	c := meta.FindStatusCondition(pl.Status.Conditions, leasingv1alpha1.ConditionProxyHealthy)
	if ev.Type != watch.Modified || pl.Status.Proxy.URL != "http://127.0.0.99:3128" || c == nil || c.Status != metav1.ConditionFalse ||
		c.Reason != leasingv1alpha1.ReasonProxyUnhealthy {
		t.Errorf("after the replacement and a failed probe: %s %+v %+v; want MODIFIED, the new URL, ProxyHealthy=False", ev.Type, pl.Status.Proxy, c)
	}
	obj, err := f.rest.Get(ctx, "crawl-1", &metav1.GetOptions{})
	if err != nil || obj.(*leasingv1alpha1.ProxyLease).Status.Proxy.URL != "http://127.0.0.99:3128" {
		t.Errorf("Get after the replacement = %v, %v", obj, err)
	}
	f.store.RemoveProxy(lease.ProxyKey{Namespace: "team-a", Name: got.Status.Proxy.Name})
	if ev := nextWatchEvent(t, w); ev.Type != watch.Deleted {
		t.Errorf("event after the Proxy was deleted = %s, want DELETED", ev.Type)
	}
}

func nextWatchEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev := <-w.ResultChan():
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event within 5s")
		return watch.Event{}
	}
}
