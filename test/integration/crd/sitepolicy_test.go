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
	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

func sitePolicyFromJSON(t *testing.T, name, specJSON string) *unstructured.Unstructured {
	t.Helper()
	var spec any
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		t.Fatalf("bad test spec %s: %v", specJSON, err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": crawlv1alpha1.SchemeGroupVersion.String(),
		"kind":       "SitePolicy",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// A SitePolicy the store could not apply is refused by kube-apiserver with
// the field named; the defaults are the store's.
func TestInvalidSitePoliciesAreRejected(t *testing.T) {
	ctx := ctxFor(t)
	// Negative control: accepted as written, and defaulted as pkg/sites'
	// defaults.
	control := sitePolicyFromJSON(t, "control", `{"sites":["example.com","*.shop.example.com","127.0.0.1"],"maxConcurrency":20}`)
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
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := env.client.Create(ctx, sitePolicyFromJSON(t, fmt.Sprintf("invalid-%d", i), tt.spec), client.DryRunAll)
			if err == nil {
				t.Fatalf("policy %s accepted, want %q", tt.spec, tt.want)
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
