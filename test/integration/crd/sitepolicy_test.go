package crd

import (
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// A SitePolicy the store could not apply is refused by kube-apiserver with
// the field named; the defaults are the store's.
func TestInvalidSitePoliciesAreRejected(t *testing.T) {
	ctx := ctxFor(t)
	// Negative control: accepted as written, and defaulted as pkg/sites'
	// defaults.
	control := fromJSON(t, "SitePolicy", "", "control", `{"sites":["example.com","*.shop.example.com","127.0.0.1"],"maxConcurrency":20,"minProxyIntervalMillis":500,"higherTiers":[{"maxConcurrency":20},{"maxConcurrency":0},{"maxConcurrency":1}]}`)
	if err := env.client.Create(ctx, control, client.DryRunAll); err != nil {
		t.Fatalf("control policy rejected: %v", err)
	}
	spec, _ := control.Object["spec"].(map[string]any)
	got := fmt.Sprint(spec["minConcurrency"], " ", spec["increaseIntervalSeconds"], " ", spec["decreasePercent"])
	want := fmt.Sprint(1, " ", int(sites.DefaultIncreaseInterval.Seconds()), " ", int(sites.DefaultDecreaseFactor*100))
	if got != want {
		t.Errorf("defaults minConcurrency, increaseIntervalSeconds, decreasePercent = %s, want pkg/sites' %s", got, want)
	}
	for i, tt := range []struct {
		name, spec, want string
	}{
		{"floor over ceiling", `{"sites":["a.example"],"maxConcurrency":2,"minConcurrency":3}`, "spec.minConcurrency must not exceed spec.maxConcurrency"},
		{"no sites", `{"sites":[],"maxConcurrency":2}`, "spec.sites"},
		{"a wildcard inside", `{"sites":["a.*.example"],"maxConcurrency":2}`, "spec.sites[0]"},
		{"uppercase", `{"sites":["Example.com"],"maxConcurrency":2}`, "spec.sites[0]"},
		{"a port", `{"sites":["example.com:443"],"maxConcurrency":2}`, "spec.sites[0]"},
		{"a scheme", `{"sites":["https://example.com"],"maxConcurrency":2}`, "spec.sites[0]"},
		{"a site twice", `{"sites":["a.example","a.example"],"maxConcurrency":2}`, "spec.sites[1]: Duplicate value"},
		{"ceiling 0", `{"sites":["a.example"],"maxConcurrency":0}`, "spec.maxConcurrency: Invalid value: 0"},
		{"keep 100%", `{"sites":["a.example"],"maxConcurrency":2,"decreasePercent":100}`, "spec.decreasePercent: Invalid value: 100"},
		{"no ceiling", `{"sites":["a.example"]}`, "spec.maxConcurrency: Required value"},
		{"a tier over the ceiling", `{"sites":["a.example"],"maxConcurrency":2,"higherTiers":[{"maxConcurrency":3}]}`,
			"spec.higherTiers: Invalid value: spec.higherTiers[*].maxConcurrency must not exceed spec.maxConcurrency"},
		{"four higher tiers", `{"sites":["a.example"],"maxConcurrency":2,"higherTiers":[{"maxConcurrency":1},{"maxConcurrency":1},{"maxConcurrency":1},{"maxConcurrency":1}]}`,
			"spec.higherTiers: Too many"},
		{"a negative tier", `{"sites":["a.example"],"maxConcurrency":2,"higherTiers":[{"maxConcurrency":-1}]}`, "spec.higherTiers[0].maxConcurrency"},
		{"a negative proxy interval", `{"sites":["a.example"],"maxConcurrency":2,"minProxyIntervalMillis":-1}`, "spec.minProxyIntervalMillis: Invalid value: -1"},
		{"a proxy interval over an hour", `{"sites":["a.example"],"maxConcurrency":2,"minProxyIntervalMillis":3600001}`, "spec.minProxyIntervalMillis: Invalid value: 3600001"},
		{"a tier without its bound", `{"sites":["a.example"],"maxConcurrency":2,"higherTiers":[{}]}`, "spec.higherTiers[0].maxConcurrency: Required value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rejectedAsInvalid(t, ctx, fromJSON(t, "SitePolicy", "", fmt.Sprintf("invalid-%d", i), tt.spec), tt.want)
		})
	}
}
