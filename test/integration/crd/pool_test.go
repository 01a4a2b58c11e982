package crd

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

func poolFromJSON(t *testing.T, namespace, name, specJSON string) *unstructured.Unstructured {
	t.Helper()
	var spec any
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		t.Fatalf("bad test spec %s: %v", specJSON, err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": crawlv1alpha1.SchemeGroupVersion.String(),
		"kind":       "ProxyPool",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       spec,
	}}
}

// Every cross-field rule of a ProxyPool is a CEL rule whose message names
// the field; the template's Proxy spec keeps the Proxy's own rules.
func TestInvalidProxyPoolsAreRejected(t *testing.T) {
	ctx := ctxFor(t)
	ns := newNamespace(t, ctx, "invalid-pools")
	const tmpl = `"template":{"spec":{"provider":"kubernetes","attributes":{"pool":"p"}}}`
	// Negative controls: accepted as written.
	for name, spec := range map[string]string{
		"control-fixed": `{"replicas":3,` + tmpl + `}`,
		"control-auto":  `{"autoscaling":{"minReplicas":0,"maxReplicas":5,"targetUtilization":80,"scaleDownDelaySeconds":60},"strategy":{"maxSurge":0,"maxUnavailable":1},` + tmpl + `}`,
	} {
		if err := env.client.Create(ctx, poolFromJSON(t, ns, name, spec), client.DryRunAll); err != nil {
			t.Fatalf("control pool %s rejected: %v", name, err)
		}
	}
	for i, tt := range []struct {
		name, spec, want string
	}{
		{"min over max", `{"autoscaling":{"minReplicas":6,"maxReplicas":5},` + tmpl + `}`, "spec.autoscaling.minReplicas must not exceed spec.autoscaling.maxReplicas"},
		{"surge and unavailable both 0", `{"strategy":{"maxSurge":0,"maxUnavailable":0},` + tmpl + `}`, "spec.strategy.maxSurge and spec.strategy.maxUnavailable must not both be 0"},
		{"external template", `{"template":{"spec":{"mode":"External","endpoint":{"host":"h"}}}}`, "spec.template.spec.mode must be Managed"},
		{"template without provider", `{"template":{"spec":{}}}`, "spec.provider is required when spec.mode is Managed"},
		{"negative replicas", `{"replicas":-1,` + tmpl + `}`, "spec.replicas: Invalid value: -1"},
		{"max replicas 0", `{"autoscaling":{"maxReplicas":0},` + tmpl + `}`, "spec.autoscaling.maxReplicas: Invalid value: 0"},
		{"utilization over 100", `{"autoscaling":{"maxReplicas":3,"targetUtilization":150},` + tmpl + `}`, "spec.autoscaling.targetUtilization: Invalid value: 150"},
		{"no template", `{"replicas":1}`, "spec.template: Required value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := env.client.Create(ctx, poolFromJSON(t, ns, fmt.Sprintf("invalid-%d", i), tt.spec), client.DryRunAll)
			if err == nil {
				t.Fatalf("pool %s accepted, want %q", tt.spec, tt.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error is not 422 Invalid: %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error does not name the field:\n got: %v\nwant substring: %s", err, tt.want)
			}
		})
	}
}
