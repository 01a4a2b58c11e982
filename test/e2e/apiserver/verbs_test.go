package apiservere2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
)

// leaseVerbs are every verb RBAC knows for proxyleases.
var leaseVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// verbCase is one request a crawler may make and the RBAC verbs it needs.
type verbCase struct {
	name string
	// needs are the proxyleases verbs the request needs; report, the
	// proxyleases/report create it needs instead.
	needs  []string
	report bool
	// existing: the request acts on a lease that exists (made by the admin).
	existing bool
	op       func(ctx context.Context, c versioned.Interface, ns, name string) error
}

var verbCases = []verbCase{
	{name: "create", needs: []string{"create"}, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		pl := newLease("")
		pl.Name = name
		_, err := c.LeasingV1alpha1().ProxyLeases(ns).Create(ctx, pl, metav1.CreateOptions{})
		return err
	}},
	// With a field manager (a query parameter) the create takes the generic
	// chain through kube-apiserver too: the lean path takes only bare ones.
	{name: "create, generic path", needs: []string{"create"}, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		pl := newLease("")
		pl.Name = name
		_, err := c.LeasingV1alpha1().ProxyLeases(ns).Create(ctx, pl, metav1.CreateOptions{FieldManager: "verbs-test"})
		return err
	}},
	{name: "apply that creates", needs: []string{"create", "patch"}, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		body := fmt.Sprintf(`{"apiVersion":%q,"kind":"ProxyLease","metadata":{"name":%q},"spec":{"ttlSeconds":60}}`,
			leasingv1alpha1.SchemeGroupVersion.String(), name)
		_, err := c.LeasingV1alpha1().ProxyLeases(ns).Patch(ctx, name, types.ApplyPatchType, []byte(body),
			metav1.PatchOptions{FieldManager: "verbs-test"})
		return err
	}},
	{name: "apply", needs: []string{"patch"}, existing: true, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		body := fmt.Sprintf(`{"apiVersion":%q,"kind":"ProxyLease","metadata":{"name":%q},"spec":{"ttlSeconds":90}}`,
			leasingv1alpha1.SchemeGroupVersion.String(), name)
		_, err := c.LeasingV1alpha1().ProxyLeases(ns).Patch(ctx, name, types.ApplyPatchType, []byte(body),
			metav1.PatchOptions{FieldManager: "verbs-test", Force: new(true)})
		return err
	}},
	{name: "update", needs: []string{"update"}, existing: true, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		pl, err := shared.leasing.LeasingV1alpha1().ProxyLeases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the admin's get: %w", err)
		}
		pl.Labels = map[string]string{"updated": "yes"}
		_, err = c.LeasingV1alpha1().ProxyLeases(ns).Update(ctx, pl, metav1.UpdateOptions{})
		return err
	}},
	{name: "patch", needs: []string{"patch"}, existing: true, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		_, err := c.LeasingV1alpha1().ProxyLeases(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"patched":"yes"}}}`), metav1.PatchOptions{})
		return err
	}},
	{name: "delete", needs: []string{"delete"}, existing: true, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		return c.LeasingV1alpha1().ProxyLeases(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}},
	{name: "delete, generic path", needs: []string{"delete"}, existing: true, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		return c.LeasingV1alpha1().RESTClient().Delete().Namespace(ns).Resource("proxyleases").Name(name).
			Param("gracePeriodSeconds", "0").Do(ctx).Error()
	}},
	{name: "deletecollection", needs: []string{"deletecollection"}, existing: true, op: func(ctx context.Context, c versioned.Interface, ns, _ string) error {
		return c.LeasingV1alpha1().ProxyLeases(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}},
	{name: "report", report: true, existing: true, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		_, err := c.LeasingV1alpha1().ProxyLeases(ns).Report(ctx, name, &leasingv1alpha1.ProxyLeaseReport{Result: "ok"}, metav1.CreateOptions{})
		return err
	}},
	{name: "get", needs: []string{"get"}, existing: true, op: func(ctx context.Context, c versioned.Interface, ns, name string) error {
		_, err := c.LeasingV1alpha1().ProxyLeases(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	}},
	{name: "list", needs: []string{"list"}, op: func(ctx context.Context, c versioned.Interface, ns, _ string) error {
		_, err := c.LeasingV1alpha1().ProxyLeases(ns).List(ctx, metav1.ListOptions{})
		return err
	}},
	{name: "watch", needs: []string{"watch"}, op: func(ctx context.Context, c versioned.Interface, ns, _ string) error {
		w, err := c.LeasingV1alpha1().ProxyLeases(ns).Watch(ctx, metav1.ListOptions{})
		if err == nil {
			w.Stop()
		}
		return err
	}},
}

// roleFor grants the verbs of c (allowed) or every proxyleases verb and
// subresource but the last one c needs (denied).
func roleFor(ns, name string, c verbCase, allowed bool) *rbacv1.Role {
	var rules []rbacv1.PolicyRule
	rule := func(resource string, verbs []string) {
		if len(verbs) > 0 {
			rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{leasingv1alpha1.GroupName}, Resources: []string{resource}, Verbs: verbs})
		}
	}
	switch {
	case allowed && c.report:
		rule("proxyleases/report", []string{"create"})
	case allowed:
		rule("proxyleases", c.needs)
	case c.report:
		rule("proxyleases", leaseVerbs)
	default:
		missing := c.needs[len(c.needs)-1]
		if slices.Contains(c.needs, "create") {
			missing = "create" // the verb kube-apiserver does not check on an apply
		}
		rule("proxyleases", slices.DeleteFunc(slices.Clone(leaseVerbs), func(v string) bool { return v == missing }))
		rule("proxyleases/report", []string{"create"})
	}
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules}
}

// Every request is authorized as RBAC says, whichever way it comes:
// through kube-apiserver (the lean path for bare creates and deletes, the
// generic chain trusting kube-apiserver's decision for the rest, creates
// and deletes with query parameters included) and sent
// to the aggregated server directly (the generic chain with its own
// SubjectAccessReviews). For each verb, a ServiceAccount with a Role of
// exactly what the request needs is allowed both ways, and one with every
// other verb is refused both ways: an apply that creates needs create, which
// kube-apiserver does not check (it authorizes the apply as a patch), so a
// Role of get and patch cannot create.
func TestEveryVerbIsAuthorizedAlike(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "verbs")
	for i := range 3 {
		addProxy(t, ns, fmt.Sprintf("px%d", i), nil)
	}
	admin := shared.leasing.LeasingV1alpha1().ProxyLeases(ns)
	// Only a lease's holder releases it: the cleanup releases each as its
	// holder (impersonated by the admin).
	cleanup := func() {
		list, err := admin.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, pl := range list.Items {
			if err := asUser(pl.Status.HolderIdentity).LeasingV1alpha1().ProxyLeases(ns).Delete(ctx, pl.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("releasing %s as its holder %s: %v", pl.Name, pl.Status.HolderIdentity, err)
			}
		}
	}
	for i, c := range verbCases {
		for _, allowed := range []bool{true, false} {
			role := roleFor(ns, fmt.Sprintf("verbs-%d-%v", i, allowed), c, allowed)
			cfg := serviceAccount(t, ns, role.Name, role)
			user := serviceaccount.MakeUsername(ns, role.Name)
			for _, via := range routes(cfg) {
				cleanup()
				name := fmt.Sprintf("verbs-%d", i)
				if c.existing {
					// The ServiceAccount's own lease (made by the admin
					// impersonating it: its Role may not create): the verb
					// under test is the holder's, RBAC alone decides.
					pl := newLease("")
					pl.Name = name
					if _, err := asUser(user).LeasingV1alpha1().ProxyLeases(ns).Create(ctx, pl, metav1.CreateOptions{}); err != nil {
						t.Fatalf("the lease for %s: %v", c.name, err)
					}
				}
				err := c.op(ctx, versioned.NewForConfigOrDie(via.cfg), ns, name)
				switch {
				case allowed && err != nil:
					t.Errorf("%s %s with a Role of exactly what it needs: %v", c.name, via.name, err)
				case !allowed && !apierrors.IsForbidden(err):
					t.Errorf("%s %s without the verb it needs: %v, want 403", c.name, via.name, err)
				}
				if !allowed && !c.existing {
					if _, err := admin.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						t.Errorf("%s %s was refused, yet lease %s exists: %v", c.name, via.name, name, err)
					}
				}
			}
		}
	}
	cleanup()
}

// asUser is the admin impersonating user (a lease's holder), with the
// admin's rights (system:masters) whatever user's RBAC allows.
func asUser(user string) versioned.Interface {
	cfg := rest.CopyConfig(shared.admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
	return versioned.NewForConfigOrDie(cfg)
}
