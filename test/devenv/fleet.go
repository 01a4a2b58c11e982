package devenv

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/artifacts/examples"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
)

// fleetComponent applies the sample fleet (artifacts/examples/fleet) and
// waits until every Proxy in it is phase Ready: provisioned as a Squid pod,
// run by the node agent, and probed healthy through that squid.
//
// The sample manifests leave spec.healthCheck.url to its default
// (http://example.com/), which a machine without internet cannot reach, so
// each Proxy is applied with the url set to the local origin. Setting it in
// the one apply rather than patching afterwards means no probe ever goes to
// the unreachable default (no Unhealthy detour before Ready) and the object
// is exactly what was applied, one field manager, no second write.
type fleetComponent struct{}

func (fleetComponent) name() string { return "sample fleet (artifacts/examples/fleet)" }

func (fleetComponent) start(ctx context.Context, e *Env) error {
	objs, err := FleetManifests(e.OriginURL + "/")
	if err != nil {
		return err
	}
	refs, err := applyObjects(ctx, e.ControlPlane.RESTConfig(), objs)
	for _, r := range refs {
		e.progressf("  applied %s", r)
	}
	if err != nil {
		return err
	}
	e.Fleet = nil
	for _, o := range objs {
		if isProxy(o) {
			ns := o.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			e.Fleet = append(e.Fleet, types.NamespacedName{Namespace: ns, Name: o.GetName()})
		}
	}
	if len(e.Fleet) == 0 {
		return fmt.Errorf("artifacts/examples/fleet holds no Proxy")
	}
	// In kubectl's order (namespace, name), as users see it.
	sort.Slice(e.Fleet, func(i, j int) bool { return e.Fleet[i].String() < e.Fleet[j].String() })
	return waitFleetReady(ctx, e, e.opts.FleetTimeout)
}

// The objects go away with the control plane; the squids with the agent.
func (fleetComponent) stop(context.Context) error { return nil }

// FleetManifests returns the objects of artifacts/examples/fleet, in file
// order, with every Proxy's (and ProxyPool template's) spec.healthCheck.url
// set to healthURL.
func FleetManifests(healthURL string) ([]*unstructured.Unstructured, error) {
	var files []string
	err := fs.WalkDir(examples.Fleet, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (path.Ext(p) == ".yaml" || path.Ext(p) == ".yml") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing the sample fleet: %w", err)
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := fs.ReadFile(examples.Fleet, f)
		if err != nil {
			return nil, err
		}
		objs, err := decodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, o := range objs {
			var at []string
			switch {
			case isProxy(o):
				at = []string{"spec", "healthCheck", "url"}
			case isPool(o):
				at = []string{"spec", "template", "spec", "healthCheck", "url"}
			default:
				continue
			}
			if err := unstructured.SetNestedField(o.Object, healthURL, at...); err != nil {
				return nil, fmt.Errorf("%s: setting %s of %s: %w", f, strings.Join(at, "."), o.GetName(), err)
			}
		}
		out = append(out, objs...)
	}
	return out, nil
}

// waitFleetReady polls the fleet until every Proxy is phase Ready, printing
// each phase change.
func waitFleetReady(ctx context.Context, e *Env, timeout time.Duration) error {
	scheme, err := app.NewScheme()
	if err != nil {
		return err
	}
	c, err := client.New(e.ControlPlane.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	began := time.Now()
	phases := map[types.NamespacedName]crawlv1alpha1.ProxyPhase{}
	for {
		ready := 0
		var summary []string
		for _, key := range e.Fleet {
			var p crawlv1alpha1.Proxy
			if err := c.Get(ctx, key, &p); err != nil {
				summary = append(summary, fmt.Sprintf("%s: %v", key, err))
				continue
			}
			if p.Status.Phase != phases[key] {
				phases[key] = p.Status.Phase
				e.progressf("  proxy %s: %s (%s)", key, orNone(string(p.Status.Phase)), time.Since(began).Round(100*time.Millisecond))
			}
			if p.Status.Phase == crawlv1alpha1.PhaseReady {
				ready++
				continue
			}
			summary = append(summary, fmt.Sprintf("%s: phase %s; %s", key, orNone(string(p.Status.Phase)), conditionSummary(&p)))
		}
		if ready == len(e.Fleet) {
			return nil
		}
		if time.Since(began) > timeout {
			return fmt.Errorf("the sample fleet is not Ready after %s (see %s): %s", timeout, e.LogPath("operator.log"), strings.Join(summary, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func isPool(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	return gvk.Group == crawlv1alpha1.GroupName && gvk.Kind == "ProxyPool"
}

func isProxy(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	return gvk.Group == crawlv1alpha1.GroupName && gvk.Kind == "Proxy"
}

func conditionSummary(p *crawlv1alpha1.Proxy) string {
	var parts []string
	for _, t := range []string{crawlv1alpha1.ConditionProvisioned, crawlv1alpha1.ConditionHealthy} {
		if c := meta.FindStatusCondition(p.Status.Conditions, t); c != nil {
			parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", t, c.Status, c.Reason, c.Message))
		} else {
			parts = append(parts, t+"=unknown")
		}
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "no phase yet"
	}
	return s
}
