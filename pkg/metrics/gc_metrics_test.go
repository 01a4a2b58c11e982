package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/pkg/gc"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
)

// Metrics feeds the orphan collector without pkg/gc knowing it.
var _ gc.Recorder = (*metrics.Metrics)(nil)

func TestGCMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil, metrics.Options{GCResults: gc.Results(), GCProviders: []string{"gcp", "kubernetes"}})
	if err != nil {
		t.Fatal(err)
	}
	zero := `
# HELP proxy_operator_gc_deleted_total Orphaned instances the garbage collector deleted, by provider.
# TYPE proxy_operator_gc_deleted_total counter
proxy_operator_gc_deleted_total{provider="gcp"} 0
proxy_operator_gc_deleted_total{provider="kubernetes"} 0
# HELP proxy_operator_gc_last_complete_sweep_timestamp_seconds Unix time of the last complete garbage-collection sweep (0: none yet).
# TYPE proxy_operator_gc_last_complete_sweep_timestamp_seconds gauge
proxy_operator_gc_last_complete_sweep_timestamp_seconds 0
# HELP proxy_operator_gc_sweeps_total Garbage-collection sweeps by result (complete, partial: some provider or zone unread or a delete failed, skipped: Proxies unreadable).
# TYPE proxy_operator_gc_sweeps_total counter
proxy_operator_gc_sweeps_total{result="complete"} 0
proxy_operator_gc_sweeps_total{result="partial"} 0
proxy_operator_gc_sweeps_total{result="skipped"} 0
`
	names := []string{metrics.GCDeletedName, metrics.GCSweepsName, metrics.GCLastCompleteSweepName}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(zero), names...); err != nil {
		t.Errorf("before any sweep: %v", err)
	}

	complete := time.Unix(1_900_000_000, 500_000_000)
	m.GCDeleted("gcp")
	m.GCDeleted("gcp")
	m.GCSweep(string(gc.ResultComplete), complete)
	// Neither a partial nor a skipped sweep moves the last complete one.
	m.GCSweep(string(gc.ResultPartial), complete.Add(time.Minute))
	m.GCSweep(string(gc.ResultSkipped), complete.Add(2*time.Minute))

	after := strings.NewReplacer(
		`{provider="gcp"} 0`, `{provider="gcp"} 2`,
		"seconds 0\n", "seconds 1.9000000005e+09\n",
		`{result="complete"} 0`, `{result="complete"} 1`,
		`{result="partial"} 0`, `{result="partial"} 1`,
		`{result="skipped"} 0`, `{result="skipped"} 1`,
	).Replace(zero)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(after), names...); err != nil {
		t.Errorf("after three sweeps: %v", err)
	}
}
