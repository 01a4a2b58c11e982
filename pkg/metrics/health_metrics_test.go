package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/pkg/health"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
)

// Metrics feeds the health engine without pkg/health knowing it.
var _ health.ProbeMetrics = (*metrics.Metrics)(nil)

func TestHealthProbeMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg, nil, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveProbe("ns/a", 30*time.Millisecond, true)
	m.ObserveProbe("ns/a", 2*time.Second, false)
	m.ObserveProbe("ns/b", 3*time.Millisecond, true)

	want := `
# HELP proxy_operator_healthcheck_failures_total Failed health probes through each proxy (namespace/name).
# TYPE proxy_operator_healthcheck_failures_total counter
proxy_operator_healthcheck_failures_total{proxy="ns/a"} 1
proxy_operator_healthcheck_failures_total{proxy="ns/b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.HealthcheckFailuresName); err != nil {
		t.Error(err)
	}
	// One histogram for the fleet (not one per proxy), the last duration
	// per proxy.
	if got := testutil.CollectAndCount(reg, metrics.HealthcheckDurationName); got != 1 {
		t.Errorf("%d duration histograms, want 1 for the fleet", got)
	}
	want = `
# HELP proxy_operator_healthcheck_latency_seconds Duration of the last health probe through each proxy (namespace/name), failed or not.
# TYPE proxy_operator_healthcheck_latency_seconds gauge
proxy_operator_healthcheck_latency_seconds{proxy="ns/a"} 2
proxy_operator_healthcheck_latency_seconds{proxy="ns/b"} 0.003
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.HealthcheckLatencyName); err != nil {
		t.Error(err)
	}

	m.Forget("ns/a")
	want = `
# HELP proxy_operator_healthcheck_failures_total Failed health probes through each proxy (namespace/name).
# TYPE proxy_operator_healthcheck_failures_total counter
proxy_operator_healthcheck_failures_total{proxy="ns/b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.HealthcheckFailuresName); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(reg, metrics.HealthcheckLatencyName); got != 1 {
		t.Errorf("%d latency series after Forget, want 1", got)
	}
	if got := testutil.CollectAndCount(reg, metrics.HealthcheckDurationName); got != 1 {
		t.Errorf("the fleet's histogram went with a Forget: %d", got)
	}
	// Forgetting an unknown proxy is harmless.
	m.Forget("ns/unknown")
}

// Every series the operator's metrics package exports is named
// proxy_operator_… (dashboards and recording rules select on the prefix).
func TestEveryNameHasThePrefix(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg, nil, metrics.Options{LeaseAPIs: []string{"http"}, LeaseOutcomes: []string{"granted"},
		GCResults: []string{"complete"}, GCProviders: []string{"gcp"}, CheckpointResults: []string{"written"}})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveProbe("ns/a", time.Millisecond, false)
	m.LeaseRequest("http", "granted")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) < 5 {
		t.Fatalf("%d metric families gathered: the check would see too little", len(families))
	}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "proxy_operator_") {
			t.Errorf("metric %s lacks the proxy_operator_ prefix", f.GetName())
		}
	}
}
