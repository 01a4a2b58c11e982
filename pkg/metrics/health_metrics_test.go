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
# HELP healthcheck_failures_total Failed health probes through each proxy (namespace/name).
# TYPE healthcheck_failures_total counter
healthcheck_failures_total{proxy="ns/a"} 1
healthcheck_failures_total{proxy="ns/b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.HealthcheckFailuresName); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(reg, metrics.HealthcheckDurationName); got != 2 {
		t.Errorf("%d duration series, want 2", got)
	}

	m.Forget("ns/a")
	want = `
# HELP healthcheck_failures_total Failed health probes through each proxy (namespace/name).
# TYPE healthcheck_failures_total counter
healthcheck_failures_total{proxy="ns/b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.HealthcheckFailuresName); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(reg, metrics.HealthcheckDurationName); got != 1 {
		t.Errorf("%d duration series after Forget, want 1", got)
	}
	// Forgetting an unknown proxy is harmless.
	m.Forget("ns/unknown")
}
