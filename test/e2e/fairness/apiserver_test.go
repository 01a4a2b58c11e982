package fairnesse2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
)

// crawlerRole lets a ServiceAccount lease in testNamespace: exactly the verbs
// these tests use.
const crawlerRole = "proxylease-crawler"

// crawler is a ServiceAccount's identity on the aggregated API.
type crawler struct {
	user    string
	cfg     *rest.Config
	leasing versioned.Interface
}

var (
	crawlersOnce sync.Once
	crawlers     map[string]*crawler
	crawlersErr  error
)

// saCrawlers returns crawler-a and crawler-b: ServiceAccounts of
// testNamespace bound to a Role allowing proxyleases create/delete/get,
// authenticating with client certificates the control plane issues for
// system:serviceaccount:<ns>:<name> (no impersonation: kube-apiserver and the
// aggregated server see exactly that user). It waits until RBAC lets both
// lease, and checks that an unbound ServiceAccount may not (so it is the Role
// that allows them).
func saCrawlers(t *testing.T) map[string]*crawler {
	t.Helper()
	crawlersOnce.Do(func() { crawlers, crawlersErr = setupCrawlers(context.Background()) })
	if crawlersErr != nil {
		t.Fatal(crawlersErr)
	}
	return crawlers
}

func setupCrawlers(ctx context.Context) (map[string]*crawler, error) {
	c := shared.client
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: crawlerRole},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{leasingv1alpha1.GroupName},
			Resources: []string{"proxyleases"},
			Verbs:     []string{"create", "delete", "get"},
		}},
	}
	if err := c.Create(ctx, role); err != nil {
		return nil, fmt.Errorf("creating Role: %w", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: crawlerRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: crawlerRole},
	}
	out := map[string]*crawler{}
	for _, name := range []string{"crawler-a", "crawler-b", "crawler-unbound"} {
		if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name}}); err != nil {
			return nil, fmt.Errorf("creating ServiceAccount %s: %w", name, err)
		}
		user := "system:serviceaccount:" + testNamespace + ":" + name
		cfg, err := shared.cp.ClientConfigFor(user, "system:serviceaccounts", "system:serviceaccounts:"+testNamespace)
		if err != nil {
			return nil, err
		}
		// No client-side throttling: it would delay requests the fairness
		// check assumes are already on their way.
		cfg.QPS, cfg.Burst = 1000, 1000
		cs, err := versioned.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		out[name] = &crawler{user: user, cfg: cfg, leasing: cs}
		if name != "crawler-unbound" {
			binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: testNamespace, Name: name})
		}
	}
	if err := c.Create(ctx, binding); err != nil {
		return nil, fmt.Errorf("creating RoleBinding: %w", err)
	}
	for _, name := range []string{"crawler-a", "crawler-b"} {
		cr := out[name]
		var lastErr error
		err := waitFor(ctx, 30*time.Second, name+" to be allowed to lease", func() (bool, string) {
			pl, err := cr.leasing.LeasingV1alpha1().ProxyLeases(testNamespace).Create(ctx, newProxyLease(name, 0), metav1.CreateOptions{})
			if err != nil {
				lastErr = err
				return false, err.Error()
			}
			lastErr = cr.leasing.LeasingV1alpha1().ProxyLeases(testNamespace).Delete(ctx, pl.Name, metav1.DeleteOptions{})
			return lastErr == nil, fmt.Sprint(lastErr)
		})
		if err != nil {
			return nil, fmt.Errorf("%w (last error %v)", err, lastErr)
		}
	}
	_, err := out["crawler-unbound"].leasing.LeasingV1alpha1().ProxyLeases(testNamespace).Create(ctx, newProxyLease("unbound", 0), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("an unbound ServiceAccount's lease: %v, want Forbidden", err)
	}
	return out, nil
}

// newProxyLease is a lease of the test proxy waiting up to wait seconds.
func newProxyLease(prefix string, wait int32) *leasingv1alpha1.ProxyLease {
	return &leasingv1alpha1.ProxyLease{
		TypeMeta:   metav1.TypeMeta{APIVersion: leasingv1alpha1.SchemeGroupVersion.String(), Kind: "ProxyLease"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
		Spec: leasingv1alpha1.ProxyLeaseSpec{
			Selector:    map[string]string{selectorKey: selector},
			Target:      "example.com",
			TTLSeconds:  ptr.To[int32](60),
			WaitSeconds: wait,
		},
	}
}

// checkLeased checks a granted ProxyLease: the test proxy, held by user.
func checkLeased(pl *leasingv1alpha1.ProxyLease, user string) error {
	if pl.Status.Proxy == nil || pl.Status.Proxy.Name != proxyName || pl.Status.HolderIdentity != user {
		return fmt.Errorf("ProxyLease %s status %+v, want proxy %s held by %s", pl.Name, pl.Status, proxyName, user)
	}
	return nil
}

// TestServiceAccountsAlternate: two ServiceAccounts creating ProxyLeases with
// spec.waitSeconds through kube-apiserver and the aggregated server — each
// its own flow, the authenticated user — are served in turn.
func TestServiceAccountsAlternate(t *testing.T) {
	crs := saCrawlers(t)
	names := []string{"crawler-a", "crawler-b"}
	grants := contend(t, names, func(ctx context.Context, name string) (func(context.Context) error, error) {
		cr := crs[name]
		leases := cr.leasing.LeasingV1alpha1().ProxyLeases(testNamespace)
		pl, err := leases.Create(ctx, newProxyLease(name, waitSeconds), metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating a ProxyLease: %w", err)
		}
		if err := checkLeased(pl, cr.user); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			if err := leases.Delete(ctx, pl.Name, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("deleting ProxyLease %s: %w", pl.Name, err)
			}
			return nil
		}, nil
	})
	assertFair(t, names, grants)
}

// TestFullQueueIsTooManyRequests: over the per-flow limit, ProxyLease create
// is answered with the Kubernetes Status for 429 — reason TooManyRequests,
// details.retryAfterSeconds and a Retry-After header that kube-apiserver
// passes on — at once; client-go recognises it. Another ServiceAccount (its
// own flow) still queues.
func TestFullQueueIsTooManyRequests(t *testing.T) {
	crs := saCrawlers(t)
	ctx := context.Background()
	hc := newHTTPClient()
	a, err := postLease(ctx, hc, identityB, leaseRequest(0))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := granted(a)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			if err := deleteLease(ctx, hc, identityB, holder.LeaseID); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()

	results := make(chan error, queueMaxPerFlow+1)
	wait := func(cr *crawler) {
		leases := cr.leasing.LeasingV1alpha1().ProxyLeases(testNamespace)
		pl, err := leases.Create(ctx, newProxyLease("queued", 20), metav1.CreateOptions{})
		if err == nil {
			if err = checkLeased(pl, cr.user); err == nil {
				err = leases.Delete(ctx, pl.Name, metav1.DeleteOptions{})
			}
		}
		results <- err
	}
	a1 := crs["crawler-a"]
	for range queueMaxPerFlow {
		go wait(a1)
	}
	waitQueued(t, queueMaxPerFlow)
	before := metric(t, rejectedCapacity)
	wantRetry := int(queueRetryAfter / time.Second)

	// On the wire, as kubectl or any client sees it.
	body, err := json.Marshal(newProxyLease("over", 20))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rest.HTTPClientFor(a1.cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := a1.cfg.Host + "/apis/" + leasingv1alpha1.SchemeGroupVersion.String() + "/namespaces/" + testNamespace + "/proxyleases"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	sent := time.Now()
	resp, err := raw.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if took := time.Since(sent); took > 2*time.Second {
		t.Errorf("the 429 took %s; a full queue must reject at once", took)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("over the per-flow limit: %d %s, want 429", resp.StatusCode, data)
	}
	if got := resp.Header.Get("Retry-After"); got != strconv.Itoa(wantRetry) {
		t.Errorf("Retry-After = %q, want %d", got, wantRetry)
	}
	var status metav1.Status
	if err := json.Unmarshal(data, &status); err != nil {
		t.Fatalf("429 body %q is not a Status: %v", data, err)
	}
	if status.Kind != "Status" || status.Status != metav1.StatusFailure || status.Code != http.StatusTooManyRequests ||
		status.Reason != metav1.StatusReasonTooManyRequests || status.Details == nil || int(status.Details.RetryAfterSeconds) != wantRetry {
		t.Errorf("429 Status %+v (details %+v), want Failure/429/TooManyRequests with retryAfterSeconds %d", status, status.Details, wantRetry)
	}

	// Through client-go, which would retry a 429 on its own: one try only.
	err = a1.leasing.LeasingV1alpha1().RESTClient().Post().MaxRetries(0).Namespace(testNamespace).
		Resource("proxyleases").Body(newProxyLease("over", 20)).Do(ctx).Error()
	if !apierrors.IsTooManyRequests(err) {
		t.Errorf("client-go create over the limit: %v, want TooManyRequests", err)
	} else if secs, ok := apierrors.SuggestsClientDelay(err); !ok || secs != wantRetry {
		t.Errorf("client-go suggested delay %d %v, want %d", secs, ok, wantRetry)
	}
	if d := metric(t, rejectedCapacity) - before; d != 2 {
		t.Errorf("%s grew by %v, want 2 (the two rejected creates)", rejectedCapacity, d)
	}

	// Negative control: crawler-b is another flow and still queues.
	go wait(crs["crawler-b"])
	waitQueued(t, queueMaxPerFlow+1)

	release()
	for range queueMaxPerFlow + 1 {
		select {
		case err := <-results:
			if err != nil {
				t.Errorf("queued ProxyLease: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a queued ProxyLease was not granted after the release")
		}
	}
}
