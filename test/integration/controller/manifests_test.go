package controller_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/artifacts/operator"
	"github.com/proxy-operator/proxy-operator/artifacts/rbac"
)

// The shipped manifests are accepted by the API server (schema and
// admission), and every binding names a role the generated RBAC defines.
func TestDeploymentManifestsApply(t *testing.T) {
	t.Parallel()
	c, err := client.New(shared.Admin, client.Options{Scheme: shared.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	roles := decodeAll(t, rbac.FS, "role.yaml")
	objs := decodeAll(t, operator.FS, "operator.yaml")
	defined := map[string]bool{}
	for _, r := range roles {
		defined[r.GetKind()+"/"+r.GetNamespace()+"/"+r.GetName()] = true
	}
	ctx := context.Background()
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "RoleBinding" {
			ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
			name, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
			ns := ""
			if ref == "Role" {
				ns = o.GetNamespace()
			}
			if !defined[ref+"/"+ns+"/"+name] {
				t.Errorf("%s %s binds %s %s/%s, which artifacts/rbac does not define", o.GetKind(), o.GetName(), ref, ns, name)
			}
		}
	}
	// Namespace first so namespaced objects are admitted; the ClusterRole
	// exists already (TestMain), so roles are dry-run.
	for _, o := range append(objs, roles...) {
		var opts []client.CreateOption
		if o.GetKind() == "ClusterRole" {
			opts = append(opts, client.DryRunAll)
			o.SetName(o.GetName() + "-dry-run")
		}
		if err := c.Create(ctx, o, opts...); err != nil {
			t.Errorf("creating %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRoleBinding", "RoleBinding", "Deployment"} {
		if kinds[k] != 1 {
			t.Errorf("operator.yaml has %d %s, want 1", kinds[k], k)
		}
	}
}

type readFS interface{ ReadFile(string) ([]byte, error) }

func decodeAll(t *testing.T, fsys readFS, name string) []*unstructured.Unstructured {
	t.Helper()
	data, err := fsys.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		out = append(out, u)
	}
	return out
}
