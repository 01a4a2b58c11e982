package apiservere2e

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
)

// crawlerRole grants what an in-cluster crawler needs: ProxyLeases and, for
// the baseline, ConfigMaps.
func crawlerRole(ns string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "crawler", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{leasingv1alpha1.GroupName}, Resources: []string{"proxyleases", "proxyleases/report"}, Verbs: []string{"create", "get", "list", "watch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "delete"}},
		},
	}
}

// serviceAccount creates ServiceAccount name in ns, bound to crawlerRole when
// bound, and returns a client config authenticating with a token of it (from
// the TokenRequest API), as an in-cluster crawler's is.
func serviceAccount(t testing.TB, ns, name string, bound bool) *rest.Config {
	t.Helper()
	ctx := context.Background()
	kube := shared.kube
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if bound {
		if _, err := kube.RbacV1().Roles(ns).Create(ctx, crawlerRole(ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "crawler-" + name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "crawler"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		}
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	tok, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(shared.admin)
	cfg.BearerToken = tok.Status.Token
	cfg.QPS = -1
	cfg.RateLimiter = nil
	return cfg
}

// route is a way to the aggregated server with one client config.
type route struct {
	name string
	cfg  *rest.Config
}

// routes are cfg through kube-apiserver, and the same credentials sent to
// the aggregated server directly (as the aggregator dials it).
func routes(cfg *rest.Config) []route {
	direct := rest.CopyConfig(cfg)
	direct.Host = shared.serverURL
	direct.CAData = shared.server.CABundle()
	direct.ServerName = "proxy-lease-api.proxy-operator-system.svc"
	return []route{{"through kube-apiserver", cfg}, {"directly", direct}}
}

// Every ProxyLease request is authorized as its caller: through
// kube-apiserver (which authorizes before it proxies), and sent to the
// aggregated server directly with a ServiceAccount token (which the server
// reviews itself with a SubjectAccessReview). A ServiceAccount without the
// Role is refused both ways; with it, allowed both ways.
func TestEveryRequestIsAuthorizedAsTheCaller(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "authz")
	addProxy(t, ns, "px", nil)
	for _, tc := range []struct {
		name  string
		bound bool
	}{{"crawler", true}, {"nobody", false}} {
		cfg := serviceAccount(t, ns, tc.name, tc.bound)
		for _, via := range routes(cfg) {
			leases := versioned.NewForConfigOrDie(via.cfg).LeasingV1alpha1().ProxyLeases(ns)
			pl, err := leases.Create(ctx, newLease("authz-"), metav1.CreateOptions{})
			if !tc.bound {
				if !apierrors.IsForbidden(err) {
					t.Errorf("%s without the Role, create %s: %v, want 403", tc.name, via.name, err)
				}
				if _, err := leases.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
					t.Errorf("%s without the Role, list %s: %v, want 403", tc.name, via.name, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s with the Role, create %s: %v", tc.name, via.name, err)
				continue
			}
			if pl.Status.HolderIdentity != "system:serviceaccount:"+ns+":"+tc.name {
				t.Errorf("holder %q, want the ServiceAccount", pl.Status.HolderIdentity)
			}
			if err := leases.Delete(ctx, pl.Name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("%s with the Role, delete %s: %v", tc.name, via.name, err)
			}
		}
	}
}
