package operatore2e

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	discoveryclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/test/builders"
)

const leaseManifest = `apiVersion: leasing.crawl.example.com/v1alpha1
kind: ProxyLease
metadata:
  generateName: crawler-
spec:
  selector:
    region: eu
  target: example.com
  ttlSeconds: 120
`

// readyProxy creates a Managed Proxy of the kubernetes provider (a Squid pod
// the node agent runs) and waits until it is Ready: provisioned and healthy
// through its own Squid.
func readyProxy(t *testing.T, ns, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	ctx := context.Background()
	p := builders.Proxy(ns, name).Managed("kubernetes").Attr("region", "eu").Probe(shared.target.URL+"/healthz", 2, 1).Obj()
	if err := shared.client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.client.Delete(context.Background(), p) })
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := shared.client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionHealthy), nil
	})
	if err != nil {
		t.Fatalf("Proxy %s/%s never became Ready: %v (status %+v)", ns, name, err, p.Status)
	}
	return p
}

func TestKubectlLeaseForwardsThroughTheOperatorsSquid(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "crawlers")
	p := readyProxy(t, ns, "squid-eu")

	var pl leasingv1alpha1.ProxyLease
	// The lease store learns the Proxy's health from the manager's cache: it
	// can trail the condition by an informer event.
	var out, errOut string
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, errOut, err = kubectlIn(t, leaseManifest, "create", "-n", ns, "-f", "-", "-o", "yaml")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("kubectl create: %v\n%s", err, errOut)
	}
	if err := yaml.Unmarshal([]byte(out), &pl); err != nil {
		t.Fatal(err)
	}
	if pl.Status.Proxy == nil || pl.Status.Proxy.Name != p.Name || pl.Status.Credentials == nil {
		t.Fatalf("lease status %+v, want Proxy %s with credentials", pl.Status, p.Name)
	}
	// The URL is the Proxy's with the lease's credentials as userinfo.
	proxyURL, err := url.Parse(pl.Status.Proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := proxyURL.User.Password(); "http://"+proxyURL.Host != p.ProxyURL() || proxyURL.User.Username() != pl.Status.Credentials.Username ||
		pw != pl.Status.Credentials.Password {
		t.Fatalf("status.proxy.url %q, want %s with the credentials %s", pl.Status.Proxy.URL, p.ProxyURL(), pl.Status.Credentials.Username)
	}
	// Without them, the Squid refuses.
	bare := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxyURL.Host}), DisableKeepAlives: true},
		Timeout: 10 * time.Second}
	if resp, err := bare.Get(shared.target.URL + "/crawl"); err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("through %s without the credentials: %v, want 407", proxyURL.Host, err)
	} else {
		_ = resp.Body.Close()
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	before := shared.targetHits.Load()
	resp, err := hc.Get(shared.target.URL + "/crawl")
	if err != nil {
		t.Fatalf("GET through the leased proxy %s: %v", proxyURL, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(strings.ToLower(string(body)), "squid") || shared.targetHits.Load() <= before {
		t.Errorf("through the lease: %d %q (want the target's answer with squid's Via)", resp.StatusCode, body)
	}

	leases := shared.leasing.LeasingV1alpha1().ProxyLeases(ns)
	if _, err := leases.Report(ctx, pl.Name, &leasingv1alpha1.ProxyLeaseReport{Result: leasingv1alpha1.ResultOK}, metav1.CreateOptions{}); err != nil {
		t.Errorf("report: %v", err)
	}
	// The only Proxy is leased: a second lease is refused and says why.
	_, errOut, err = kubectlIn(t, leaseManifest, "create", "-n", ns, "-f", "-")
	if err == nil || !strings.Contains(errOut, "at capacity 1") {
		t.Errorf("second lease: %v %s", err, errOut)
	}
	// Another namespace never gets this namespace's Proxy.
	other := namespace(t, "crawlers-elsewhere")
	if _, errOut, err := kubectlIn(t, leaseManifest, "create", "-n", other, "-f", "-"); err == nil || !strings.Contains(errOut, "considered 0") {
		t.Errorf("lease in a namespace without Proxies: %v %s", err, errOut)
	}
	mustKubectl(t, "", "delete", "proxylease", pl.Name, "-n", ns)
	if _, err := leases.Get(ctx, pl.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after kubectl delete: %v", err)
	}
	// The HTTP API of the same operator sees the proxy free again.
	httpClient, err := discoveryclient.New(shared.discovery, "")
	if err != nil {
		t.Fatal(err)
	}
	l, err := httpClient.Acquire(ctx, discoveryLease(ns))
	if err != nil {
		t.Fatalf("HTTP acquire after the kubectl delete: %v", err)
	}
	if table := mustKubectl(t, "", "get", "proxyleases", "-n", ns); !strings.Contains(table, l.LeaseID) {
		t.Errorf("kubectl does not show the HTTP lease:\n%s", table)
	}
	// The Go client's lease URL carries its credentials: a client that
	// uses it as it is gets through the operator's Squid.
	goURL, err := url.Parse(l.Proxy.URL)
	if err != nil || l.Credentials == nil || goURL.User.Username() != l.Credentials.Username {
		t.Fatalf("the Go client's lease: URL %q, credentials %v; want the URL to carry them", l.Proxy.URL, l.Credentials)
	}
	goClient := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(goURL), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	if resp, err := goClient.Get(shared.target.URL + "/go-client"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("through the Go client's lease: %v, want 200", err)
	} else {
		_ = resp.Body.Close()
	}
	if err := httpClient.Release(ctx, l.LeaseID); err != nil {
		t.Fatal(err)
	}
}

func TestWaitingLeaseIsGrantedOnRelease(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "waiters")
	readyProxy(t, ns, "squid-wait")
	leases := shared.leasing.LeasingV1alpha1().ProxyLeases(ns)
	newLease := func(wait int32) *leasingv1alpha1.ProxyLease {
		return &leasingv1alpha1.ProxyLease{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "w-"},
			Spec:       leasingv1alpha1.ProxyLeaseSpec{Target: "example.com", TTLSeconds: ptr.To[int32](60), WaitSeconds: wait},
		}
	}
	var holder *leasingv1alpha1.ProxyLease
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		holder, err = leases.Create(ctx, newLease(0), metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("first lease: %v", err)
	}
	type result struct {
		pl  *leasingv1alpha1.ProxyLease
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		pl, err := leases.Create(ctx, newLease(20), metav1.CreateOptions{})
		done <- result{pl, err, time.Now()}
	}()
	select {
	case r := <-done:
		t.Fatalf("the waiting lease returned while the proxy was held: %+v", r)
	case <-time.After(time.Second):
	}
	released := time.Now()
	if err := leases.Delete(ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("waiting lease: %v", r.err)
		}
		if r.pl.Status.Proxy == nil || r.pl.Status.Proxy.Name != "squid-wait" {
			t.Errorf("waiting lease status %+v", r.pl.Status)
		}
		if d := r.at.Sub(released); d > 2*time.Second {
			t.Errorf("granted %s after the release", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting lease was not granted after the release")
	}
}
