package apiservere2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
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

// serviceAccount creates ServiceAccount name in ns, bound to role when role
// is not nil, and returns a client config authenticating with a token of it
// (from the TokenRequest API), as an in-cluster crawler's is. It returns
// once kube-apiserver's authorizer grants every rule of role: RBAC reads
// bindings from an informer, so a request sent right after the binding is
// created may be refused, and the aggregated server would cache that denial.
func serviceAccount(t testing.TB, ns, name string, role *rbacv1.Role) *rest.Config {
	t.Helper()
	ctx := context.Background()
	kube := shared.kube
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if role != nil {
		if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		}
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		waitForRBAC(t, ns, serviceaccount.MakeUsername(ns, name), role)
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

// waitForRBAC waits (at most 30 s) until kube-apiserver allows user every
// verb of every rule of role.
func waitForRBAC(t testing.TB, ns, user string, role *rbacv1.Role) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	for _, r := range role.Rules {
		for _, group := range r.APIGroups {
			for _, res := range r.Resources {
				resource, sub, _ := strings.Cut(res, "/")
				for _, verb := range r.Verbs {
					sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
						User: user, Groups: groups,
						ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: sub},
					}}
					err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
						got, err := shared.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
						return err == nil && got.Status.Allowed, nil
					})
					if err != nil {
						t.Fatalf("RBAC never allowed %s to %s %s/%s in %s: %v", user, verb, group, res, ns, err)
					}
				}
			}
		}
	}
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
		var role *rbacv1.Role
		if tc.bound {
			role = crawlerRole(ns)
		}
		cfg := serviceAccount(t, ns, tc.name, role)
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
