package apiservere2e

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
)

// A Kubernetes user whose name is an HTTP holder ("http:" + a token's
// identity) holds its ProxyLeases as itself, not as that token: the token
// can neither read nor release them (#26 item 5). On the code before, the
// user "http:anonymous" and this suite's token-less HTTP client were one
// holder, and the client released the user's lease.
func TestKubernetesUsersCannotPassForHTTPTokens(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "http-lookalike")
	addProxy(t, ns, "px", nil)
	user := "http:" + discovery.AnonymousIdentity
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lease", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"leasing.crawl.example.com"}, Resources: []string{"proxyleases"}, Verbs: []string{"create", "get"}}}}
	if _, err := shared.kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lease", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "lease"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := shared.kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var code int
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		// The aggregated server caches authorization decisions briefly.
		if code, _, err = postLease(t, impersonating(user), ns); code == 201 || time.Now().After(deadline) {
			break
		}
	}
	if code != 201 {
		t.Fatalf("the user %q could not lease: %d %v", user, code, err)
	}
	leases := shared.store.List(ns)
	if len(leases) != 1 {
		t.Fatalf("%d leases in %s, want 1", len(leases), ns)
	}
	l := leases[0]
	if l.Holder == user {
		t.Errorf("the user %q holds its lease as the HTTP holder %q", user, l.Holder)
	}

	c, err := client.New(shared.httpURL, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, l.ID); !client.IsForbidden(err) {
		t.Errorf("the HTTP identity %q read the user's lease: %v, want 403", discovery.AnonymousIdentity, err)
	}
	if err := c.Release(ctx, l.ID); !client.IsForbidden(err) {
		t.Errorf("the HTTP identity %q released the user's lease: %v, want 403", discovery.AnonymousIdentity, err)
	}
	if _, ok := shared.store.Get(l.ID); !ok {
		t.Error("the user's lease is gone")
	}
}
