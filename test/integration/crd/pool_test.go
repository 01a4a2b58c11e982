package crd

import (
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
		if err := env.client.Create(ctx, fromJSON(t, "ProxyPool", ns, name, spec), client.DryRunAll); err != nil {
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
			rejectedAsInvalid(t, ctx, fromJSON(t, "ProxyPool", ns, fmt.Sprintf("invalid-%d", i), tt.spec), tt.want)
		})
	}
}
