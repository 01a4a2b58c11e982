package gc

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/artifacts/crds"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/gc"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/gcefake"
)

const (
	project     = "gc-project"
	teamProject = "gc-team-project"
	// foreignProject is another team's: a Proxy names it, the operator's
	// flags do not.
	foreignProject = "gc-foreign-project"
	namespace      = "gc"
	zoneA, zoneB   = "us-central1-a", "europe-west1-b"
	minAge         = 10 * time.Minute
)

type env struct {
	admin   client.Client
	fake    *gcefake.Server
	sweeper *gc.Sweeper
	clock   *clocktesting.FakeClock
	cache   cache.Cache
}

func setup(t *testing.T) *env {
	t.Helper()
	ctx := log.IntoContext(t.Context(), testr.New(t))
	cp := controlplane.StartForTest(t, controlplane.Options{CRDFS: crds.FS})
	scheme, err := app.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cp.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	fake := gcefake.New(gcefake.Options{PageSize: 2})
	endpoint, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })

	// The manager's cache, as in the operator: the live set and the
	// gcp provider's projects come from it.
	c, err := cache.New(cp.RESTConfig(), cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cacheCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go func() { _ = c.Start(cacheCtx) }()
	if _, err := c.GetInformer(ctx, &crawlv1alpha1.Proxy{}); err != nil {
		t.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	gopts := gcp.DefaultOptions()
	gopts.Project, gopts.Endpoint, gopts.RequestTimeout = project, endpoint, 5*time.Second
	gopts.AllowedProjects = []string{teamProject}
	providers, err := provider.NewRegistry(ctx, []string{gcp.Name, kubernetes.Name}, map[string]provider.Constructor{
		gcp.Name:        func(ctx context.Context) (provider.Provider, error) { return gcp.New(ctx, gopts) },
		kubernetes.Name: func(context.Context) (provider.Provider, error) { return kubernetes.New(admin, kubernetes.Options{}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	opts := gc.DefaultOptions()
	opts.MinAge = minAge
	s, err := gc.New(gc.Config{Options: opts, Reader: c, Providers: providers, Tag: provider.DefaultTag, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &env{admin: admin, fake: fake, sweeper: s, clock: clk, cache: c}
}

// proxy creates a Proxy (its finalizer keeps it from going while the test
// wants it deleting) and returns its UID once the cache has it.
func (e *env) proxy(t *testing.T, name, gcpProject string) types.UID {
	t.Helper()
	p := builders.Proxy(namespace, name).Finalizer("gc.test/hold").GCP(zoneA, "e2-small").NoAttrs().Project(gcpProject).
		Probe("http://127.0.0.1:9/", 10, 1).Obj()
	if err := e.admin.Create(t.Context(), p); err != nil {
		t.Fatalf("creating Proxy %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		var cur crawlv1alpha1.Proxy
		if err := e.admin.Get(ctx, client.ObjectKeyFromObject(p), &cur); err == nil {
			cur.Finalizers = nil
			_ = e.admin.Update(ctx, &cur)
			_ = e.admin.Delete(ctx, &cur)
		}
	})
	return p.UID
}

func (e *env) plantVM(t *testing.T, proj, zone, name string, uid types.UID, age time.Duration) {
	t.Helper()
	labels := map[string]string{gcp.LabelTag: provider.DefaultTag}
	if uid != "" {
		labels[gcp.LabelOwnerUID] = string(uid)
	}
	if err := e.fake.Plant(proj, zone, name, labels, e.clock.Now().Add(-age)); err != nil {
		t.Fatalf("planting %s: %v", name, err)
	}
}

func (e *env) plantPod(t *testing.T, name string, uid types.UID) {
	t.Helper()
	labels := map[string]string{provider.TagLabel: provider.DefaultTag}
	if uid != "" {
		labels[provider.OwnerUIDLabel] = string(uid)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		// Never scheduled (no node here runs it): deleted at once.
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "squid", Image: kubernetes.DefaultImage}}},
	}
	if err := e.admin.Create(t.Context(), pod); err != nil {
		t.Fatalf("planting pod %s: %v", name, err)
	}
}

// left lists the VMs in the fake not being deleted and the pods in the namespace by name.
func (e *env) left(t *testing.T) (vms, pods []string) {
	t.Helper()
	for _, in := range e.fake.Instances() {
		// A deleted VM is STOPPING until polled away, as in Compute Engine.
		if in.Status != gcefake.StatusStopping {
			vms = append(vms, in.Name)
		}
	}
	var pl corev1.PodList
	if err := e.admin.List(t.Context(), &pl, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pl.Items {
		pods = append(pods, p.Name)
	}
	slices.Sort(vms)
	slices.Sort(pods)
	return vms, pods
}

func (e *env) sweep(t *testing.T) gc.Report {
	t.Helper()
	rep := e.sweeper.Sweep(log.IntoContext(t.Context(), testr.New(t)))
	for _, f := range rep.Orphans {
		if f.Err != nil {
			t.Errorf("deleting %s: %v", f.ProviderID, f.Err)
		}
	}
	return rep
}

func without(s []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(s), func(x string) bool { return slices.Contains(drop, x) })
}

func TestSweepDeletesOnlyProvableOrphans(t *testing.T) {
	e := setup(t)
	live := e.proxy(t, "live", "")
	inTeam := e.proxy(t, "in-team", teamProject)
	// A Proxy naming another team's project does not bring that
	// project's VMs into the sweep (#26 item 6).
	e.proxy(t, "in-foreign", foreignProject)
	deleting := e.proxy(t, "deleting", "")
	var d crawlv1alpha1.Proxy
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: "deleting"}, &d); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Delete(t.Context(), &d); err != nil {
		t.Fatal(err)
	}

	hour := time.Hour
	e.plantVM(t, project, zoneA, "vm-orphan", "uid-of-a-gone-proxy", 2*hour)
	e.plantVM(t, teamProject, zoneA, "vm-team-orphan", "uid-of-another-gone-proxy", 2*hour)
	e.plantVM(t, project, zoneA, "vm-unlabelled", "", 2*hour)
	e.plantVM(t, project, zoneA, "vm-young", "uid-young", minAge-time.Minute)
	e.plantVM(t, project, zoneB, "vm-unreachable", "uid-in-zone-b", 2*hour)
	e.plantVM(t, project, zoneA, "vm-live", live, 2*hour)
	e.plantVM(t, teamProject, zoneA, "vm-team-live", inTeam, 2*hour)
	e.plantVM(t, project, zoneA, "vm-deleting", deleting, 2*hour)
	e.plantVM(t, foreignProject, zoneA, "vm-foreign", "uid-of-another-teams-proxy", 2*hour)
	e.fake.SetUnreachable(project, zoneB, true)
	e.plantPod(t, "pod-orphan", "uid-of-a-gone-pod-proxy")
	e.plantPod(t, "pod-unlabelled", "")
	e.plantPod(t, "pod-live", live)
	// The cache must hold the deleting Proxy's deletionTimestamp and
	// every Proxy before the sweep reads the live set.
	waitCached(t, e, 4)

	vms0, pods0 := e.left(t)
	rep := e.sweep(t)
	vms, pods := e.left(t)
	if diff := diffNames(without(vms0, "vm-orphan", "vm-team-orphan"), vms); diff != "" {
		t.Errorf("VMs after the first sweep: %s", diff)
	}
	// Every pod was just created: younger than the minimum age.
	if diff := diffNames(pods0, pods); diff != "" {
		t.Errorf("pods after the first sweep: %s", diff)
	}
	if rep.Result != gc.ResultPartial {
		t.Errorf("first sweep result %s, want partial (zone %s unreachable): %v", rep.Result, zoneB, rep.Errors)
	}

	// An hour later the planted pod is an orphan too, and so is the VM
	// that was young; zone B is still unreachable.
	e.clock.Step(hour)
	e.sweep(t)
	vms, pods = e.left(t)
	if diff := diffNames([]string{"vm-deleting", "vm-foreign", "vm-live", "vm-team-live", "vm-unlabelled", "vm-unreachable"}, vms); diff != "" {
		t.Errorf("VMs after the second sweep: %s", diff)
	}
	if diff := diffNames([]string{"pod-live", "pod-unlabelled"}, pods); diff != "" {
		t.Errorf("pods after the second sweep: %s", diff)
	}

	// Zone B answers again: its orphan goes, and the sweep is complete.
	e.fake.SetUnreachable(project, zoneB, false)
	if rep := e.sweep(t); rep.Result != gc.ResultComplete {
		t.Errorf("third sweep result %s, want complete: %v", rep.Result, rep.Errors)
	}
	vms, _ = e.left(t)
	if diff := diffNames([]string{"vm-deleting", "vm-foreign", "vm-live", "vm-team-live", "vm-unlabelled"}, vms); diff != "" {
		t.Errorf("VMs after zone B came back: %s", diff)
	}
}

// waitCached waits until the cache (the sweeper's live set) holds n Proxies
// and the deleting one with its deletionTimestamp.
func waitCached(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var l crawlv1alpha1.ProxyList
		var d crawlv1alpha1.Proxy
		if e.cache.List(t.Context(), &l) == nil && len(l.Items) == n &&
			e.cache.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: "deleting"}, &d) == nil && d.DeletionTimestamp != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache never showed the %d Proxies, one of them deleting", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func diffNames(want, got []string) string {
	if slices.Equal(want, got) {
		return ""
	}
	return fmt.Sprintf("got %v, want %v", got, want)
}
