package apiservere2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	discoveryclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxy-operator/proxy-operator/pkg/generated/informers/externalversions"
)

func newLease(generateName string) *leasingv1alpha1.ProxyLease {
	return &leasingv1alpha1.ProxyLease{
		ObjectMeta: metav1.ObjectMeta{GenerateName: generateName},
		Spec:       leasingv1alpha1.ProxyLeaseSpec{Target: "example.com"},
	}
}

func TestReportThroughClientsetAndRaw(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "reports")
	addProxy(t, ns, "px", nil)
	leases := shared.leasing.LeasingV1alpha1().ProxyLeases(ns)
	pl, err := leases.Create(ctx, newLease("r-"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := leases.Report(ctx, pl.Name, &leasingv1alpha1.ProxyLeaseReport{Result: leasingv1alpha1.ResultOK}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("typed report: %v", err)
	}
	if st.Status != metav1.StatusSuccess || st.Code != 201 || !strings.Contains(st.Message, "reported ok") {
		t.Errorf("typed report answered %+v", st)
	}
	got, _ := leases.Get(ctx, pl.Name, metav1.GetOptions{})
	if got.Status.LastResult != leasingv1alpha1.ResultOK {
		t.Errorf("lastResult = %q", got.Status.LastResult)
	}
	_, err = leases.Report(ctx, pl.Name, &leasingv1alpha1.ProxyLeaseReport{Result: "fine"}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "result") {
		t.Errorf("bad result: %v, want 422 naming result", err)
	}
	_, err = leases.Report(ctx, "no-such-lease", &leasingv1alpha1.ProxyLeaseReport{Result: "ok"}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("report on a missing lease: %v, want 404", err)
	}

	path := fmt.Sprintf("/apis/leasing.crawl.example.com/v1alpha1/namespaces/%s/proxyleases/%s/report", ns, pl.Name)
	out := mustKubectlIn(t, example(t, "report.json"), "create", "--raw", path, "-f", "-")
	var raw metav1.Status
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("kubectl create --raw answered %q: %v", out, err)
	}
	if raw.Status != metav1.StatusSuccess || !strings.Contains(raw.Message, "rate_limited") {
		t.Errorf("raw report answered %+v", raw)
	}
	// rate_limited put (px, example.com) in cooldown: after release, a new lease for
	// that target is refused with the cooldown named.
	if err := leases.Delete(ctx, pl.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = leases.Create(ctx, newLease("r-"), metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "in cooldown 1") {
		t.Errorf("lease on a cooling target: %v", err)
	}
	// Negative control: another target is served.
	other := newLease("r-")
	other.Spec.Target = "other.example"
	got, err = leases.Create(ctx, other, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("lease for another target: %v", err)
	}
	// A cooling report must be about a site: on a lease without a target,
	// one without a target is refused naming the field (#26 item 2).
	if err := leases.Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	untargeted := newLease("u-")
	untargeted.Spec.Target = ""
	if untargeted, err = leases.Create(ctx, untargeted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = leases.Report(ctx, untargeted.Name, &leasingv1alpha1.ProxyLeaseReport{Result: leasingv1alpha1.ResultBanned}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "target: Required value") {
		t.Errorf("a banned report without any target: %v, want 422 naming target", err)
	}
	if _, err := leases.Report(ctx, untargeted.Name, &leasingv1alpha1.ProxyLeaseReport{Result: leasingv1alpha1.ResultBanned, Target: "third.example"}, metav1.CreateOptions{}); err != nil {
		t.Errorf("a banned report naming its target: %v", err)
	}
}

func impersonating(user string) versioned.Interface {
	cfg := rest.CopyConfig(shared.admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	return versioned.NewForConfigOrDie(cfg)
}

// postLease creates through the REST client to see the HTTP status code.
func postLease(t testing.TB, client versioned.Interface, ns string) (int, *leasingv1alpha1.ProxyLease, error) {
	t.Helper()
	var code int
	out := &leasingv1alpha1.ProxyLease{}
	err := client.LeasingV1alpha1().RESTClient().Post().Namespace(ns).Resource("proxyleases").
		Body(newLease("rbac-")).Do(context.Background()).StatusCode(&code).Into(out)
	return code, out, err
}

func TestRBACDecidesWhoMayLease(t *testing.T) {
	ns := namespace(t, "crawl-rbac")
	addProxy(t, ns, "px", nil)
	user := "system:serviceaccount:" + ns + ":crawler"
	crawler := impersonating(user)

	code, _, err := postLease(t, crawler, ns)
	if code != 403 || !apierrors.IsForbidden(err) {
		t.Fatalf("without a Role: %d %v, want 403", code, err)
	}
	_, errOut, err := kubectlIn(t, example(t, "proxylease.yaml"), "create", "-n", ns, "-f", "-", "--as", user)
	if err == nil || !strings.Contains(errOut, "Forbidden") || !strings.Contains(errOut, "proxyleases") {
		t.Errorf("kubectl --as without a Role: %v %s", err, errOut)
	}
	if n := len(shared.store.List(ns)); n != 0 {
		t.Fatalf("a forbidden request acquired %d leases", n)
	}

	rbac := strings.ReplaceAll(example(t, "crawler-rbac.yaml"), "namespace: crawlers", "namespace: "+ns)
	mustKubectlIn(t, rbac, "apply", "-f", "-")
	var pl *leasingv1alpha1.ProxyLease
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		// The aggregated server caches authorization decisions for a few seconds.
		code, pl, err = postLease(t, crawler, ns)
		if code == 201 || time.Now().After(deadline) {
			break
		}
	}
	if code != 201 || err != nil {
		t.Fatalf("with the Role: %d %v, want 201", code, err)
	}
	if pl.Status.HolderIdentity != user {
		t.Errorf("holderIdentity = %q, want %q", pl.Status.HolderIdentity, user)
	}
	// The Role is namespaced: the same crawler may not lease next door.
	next := namespace(t, "crawl-rbac-next")
	addProxy(t, next, "px", nil)
	if code, _, err := postLease(t, crawler, next); code != 403 {
		t.Errorf("in a namespace without a RoleBinding: %d %v, want 403", code, err)
	}
	// Reports need proxyleases/report, which the crawler role grants.
	if _, err := crawler.LeasingV1alpha1().ProxyLeases(ns).Report(context.Background(), pl.Name,
		&leasingv1alpha1.ProxyLeaseReport{Result: "ok"}, metav1.CreateOptions{}); err != nil {
		t.Errorf("crawler report: %v", err)
	}
}

func TestNamespaceIsTheTenancy(t *testing.T) {
	ctx := context.Background()
	a, b := namespace(t, "tenant-a"), namespace(t, "tenant-b")
	addProxy(t, a, "px-a", nil)
	inB := shared.leasing.LeasingV1alpha1().ProxyLeases(b)
	_, err := inB.Create(ctx, newLease("b-"), metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "considered 0") {
		t.Fatalf("lease in tenant-b with a free proxy only in tenant-a: %v, want 409 considering nothing", err)
	}
	addProxy(t, b, "px-b", nil)
	got, err := inB.Create(ctx, newLease("b-"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Proxy.Name != "px-b" {
		t.Errorf("tenant-b lease got %q", got.Status.Proxy.Name)
	}
	// tenant-b's only proxy is taken; tenant-a's stays free and out of reach.
	if _, err := inB.Create(ctx, newLease("b-"), metav1.CreateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("second tenant-b lease: %v, want 409", err)
	}
	list, err := shared.leasing.LeasingV1alpha1().ProxyLeases(a).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("tenant-a sees %d leases (%v)", len(list.Items), err)
	}
}

func TestHTTPAndKubernetesShareOneStore(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "one-store")
	addProxy(t, ns, "px-1", nil)
	addProxy(t, ns, "px-2", nil)
	http, err := discoveryclient.New(shared.httpURL, "")
	if err != nil {
		t.Fatal(err)
	}
	// Made over HTTP, seen by kubectl.
	viaHTTP, err := http.Acquire(ctx, wire.AcquireRequest{Namespace: ns, Target: "example.com", TTLSeconds: 120})
	if err != nil {
		t.Fatal(err)
	}
	table := mustKubectl(t, "get", "proxyleases", "-n", ns)
	if !strings.Contains(table, viaHTTP.LeaseID) || !strings.Contains(table, viaHTTP.Proxy.Name) {
		t.Errorf("kubectl does not show the HTTP lease %s:\n%s", viaHTTP.LeaseID, table)
	}
	// Made through Kubernetes: the HTTP API may not release it (its
	// holder is the Kubernetes user, not an HTTP identity), and the refused
	// release frees nothing.
	viaKube, err := shared.leasing.LeasingV1alpha1().ProxyLeases(ns).Create(ctx, newLease("k-"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if viaKube.Status.Proxy.Name == viaHTTP.Proxy.Name {
		t.Errorf("both APIs leased %s: the store was not shared", viaKube.Status.Proxy.Name)
	}
	if err := http.Release(ctx, viaKube.Status.LeaseID); !discoveryclient.IsForbidden(err) {
		t.Fatalf("HTTP release of a Kubernetes user's lease = %v, want 403 forbidden", err)
	}
	if _, err := shared.leasing.LeasingV1alpha1().ProxyLeases(ns).Get(ctx, viaKube.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("after the refused HTTP release: %v, want the lease still there", err)
	}
	if err := shared.leasing.LeasingV1alpha1().ProxyLeases(ns).Delete(ctx, viaKube.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nor may a Kubernetes user (the admin, with kubectl) end the token's
	// lease: 403, and the token still renews it.
	if _, errOut, err := kubectl(t, "delete", "proxylease", viaHTTP.LeaseID, "-n", ns); err == nil || !strings.Contains(errOut, "Forbidden") {
		t.Errorf("kubectl delete of the token's lease: %v %s, want Forbidden", err, errOut)
	}
	if _, err := http.Renew(ctx, viaHTTP.LeaseID, time.Minute); err != nil {
		t.Errorf("the token's renewal after the refused kubectl delete: %v", err)
	}
}

func TestWatchSeesExpiryAndInformersWork(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := namespace(t, "informers")
	addProxy(t, ns, "px", nil)
	addProxy(t, ns, "px-2", nil)

	factory := externalversions.NewSharedInformerFactoryWithOptions(shared.leasing, 0, externalversions.WithNamespace(ns))
	informer := factory.Leasing().V1alpha1().ProxyLeases()
	lister := informer.Lister()
	informer.Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		t.Fatal("informer never synced")
	}

	leases := shared.leasing.LeasingV1alpha1().ProxyLeases(ns)
	w, err := leases.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	short := newLease("short-")
	short.Spec.TTLSeconds = ptr.To[int32](2)
	created, err := leases.Create(ctx, short, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var sawAdded bool
	for done := false; !done; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			pl, _ := ev.Object.(*leasingv1alpha1.ProxyLease)
			if pl == nil || pl.Name != created.Name {
				continue
			}
			switch ev.Type {
			case watch.Added:
				sawAdded = true
			case watch.Deleted:
				done = true
			}
		case <-time.After(15 * time.Second):
			t.Fatal("no DELETED for the expiring lease")
		}
	}
	if !sawAdded {
		t.Error("no ADDED before DELETED")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("DELETED came %s after create for a 2s lease", took)
	}

	long, err := leases.Create(ctx, newLease("long-"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lister to see the lease", func() bool {
		got, err := lister.ProxyLeases(ns).Get(long.Name)
		return err == nil && got.Status.LeaseID == long.Status.LeaseID
	})
	if err := leases.Delete(ctx, long.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lister to drop the lease", func() bool {
		_, err := lister.ProxyLeases(ns).Get(long.Name)
		return apierrors.IsNotFound(err)
	})
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
