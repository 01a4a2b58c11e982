package kubetokens

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

func TestServiceAccountTokens(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{SkipCRDs: true})
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "team-a"
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	must(kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lease"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{leasingv1alpha1.GroupName}, Resources: []string{"proxyleases"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}))
	token := func(sa string) string {
		t.Helper()
		must(kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}))
		tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	crawler, stranger := token("crawler"), token("stranger")
	must(kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "crawler"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "lease"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "crawler", Namespace: ns}}}, metav1.CreateOptions{}))

	// The authenticator's client counts the TokenReviews kube-apiserver gets.
	var reviews atomic.Int32
	counted := rest.CopyConfig(cp.RESTConfig())
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
				reviews.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	reviewer, err := kubernetes.NewForConfig(counted)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := &discovery.KubernetesTokens{Reviews: reviewer.AuthenticationV1().TokenReviews(), Access: reviewer.AuthorizationV1().SubjectAccessReviews(),
		TTL: 10 * time.Second, Now: func() time.Time { return now }}

	got, err := k.Authenticate(ctx, crawler)
	if err != nil {
		t.Fatalf("the bound ServiceAccount's token: %v", err)
	}
	if d := cmp.Diff(discovery.Token{Identity: "system:serviceaccount:team-a:crawler", Namespaces: []string{ns}}, got); d != "" {
		t.Errorf("the bound ServiceAccount (-want +got):\n%s", d)
	}
	if _, err := k.Authenticate(ctx, stranger); !discovery.IsForbidden(err) {
		t.Errorf("a ServiceAccount without the binding: %v, want forbidden", err)
	}
	for name, tok := range map[string]string{"garbage": "not-a-token", "a token signed by another key": crawler[:len(crawler)-4] + "AAAA"} {
		if _, err := k.Authenticate(ctx, tok); !errors.Is(err, discovery.ErrUnknownToken) {
			t.Errorf("%s: %v, want ErrUnknownToken", name, err)
		}
	}

	// Garbage costs no review; tokens shaped as the crawler's with other
	// signatures are reviewed at most a burst's worth at once (the rest
	// throttled: 503, retried) and evict no identity.
	before := reviews.Load()
	var unknown, throttled int
	for i := range 500 {
		for _, tok := range []string{"garbage-" + strconv.Itoa(i), crawler[:strings.LastIndexByte(crawler, '.')+1] + "forged" + strconv.Itoa(i)} {
			_, err := k.Authenticate(ctx, tok)
			switch {
			case errors.Is(err, discovery.ErrUnknownToken):
				unknown++
			case errors.Is(err, discovery.ErrReviewsThrottled):
				throttled++
			default:
				t.Fatalf("a forged token: %v", err)
			}
		}
	}
	if n := reviews.Load() - before; n > 100 || unknown+throttled != 1000 || throttled < 400 {
		t.Errorf("1,000 unknown tokens: %d TokenReviews (want at most 100), %d refused unknown, %d throttled", n, unknown, throttled)
	}
	before = reviews.Load()
	if _, err := k.Authenticate(ctx, crawler); err != nil || reviews.Load() != before {
		t.Errorf("the crawler after the flood: %v, %d TokenReviews; want its cached identity", err, reviews.Load()-before)
	}

	// Cached for the TTL: the binding's removal shows after it.
	if err := kube.RbacV1().RoleBindings(ns).Delete(ctx, "crawler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Authenticate(ctx, crawler); err != nil {
		t.Errorf("within the TTL the cached answer stands: %v", err)
	}
	now = now.Add(11 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := k.Authenticate(ctx, crawler)
		if discovery.IsForbidden(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the TTL, the unbound ServiceAccount: %v, want forbidden", err)
		}
		now = now.Add(11 * time.Second) // RBAC's cache in kube-apiserver may lag a moment
		time.Sleep(100 * time.Millisecond)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
