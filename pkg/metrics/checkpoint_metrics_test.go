package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
)

// Metrics feeds the checkpoint writer without pkg/checkpoint knowing it.
var _ checkpoint.Recorder = (*metrics.Metrics)(nil)

func TestCheckpointMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil, metrics.Options{CheckpointResults: checkpoint.Results()})
	if err != nil {
		t.Fatal(err)
	}
	zero := `
# HELP proxy_operator_lease_checkpoint_last_success_timestamp_seconds Unix time at which the lease checkpoint last held the lease store's state (a write, or a check that nothing changed since); 0 on a replica that does not write it (a standby).
# TYPE proxy_operator_lease_checkpoint_last_success_timestamp_seconds gauge
proxy_operator_lease_checkpoint_last_success_timestamp_seconds 0
# HELP proxy_operator_lease_checkpoint_writes_total Lease checkpoint writes of this replica by result (written, failed: retried at the next interval, fenced: another replica took the leases over).
# TYPE proxy_operator_lease_checkpoint_writes_total counter
proxy_operator_lease_checkpoint_writes_total{result="failed"} 0
proxy_operator_lease_checkpoint_writes_total{result="fenced"} 0
proxy_operator_lease_checkpoint_writes_total{result="written"} 0
`
	names := []string{metrics.CheckpointWritesName, metrics.CheckpointLastCurrentName}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(zero), names...); err != nil {
		t.Errorf("before any write: %v", err)
	}
	m.LeaseCheckpointWrite(checkpoint.ResultWritten)
	m.LeaseCheckpointWrite(checkpoint.ResultFailed)
	m.LeaseCheckpointWrite(checkpoint.ResultFailed)
	m.LeaseCheckpointCurrent(time.Unix(1_900_000_000, 500_000_000))
	after := strings.NewReplacer(
		"seconds 0\n", "seconds 1.9000000005e+09\n",
		`{result="written"} 0`, `{result="written"} 1`,
		`{result="failed"} 0`, `{result="failed"} 2`,
	).Replace(zero)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(after), names...); err != nil {
		t.Errorf("after three writes: %v", err)
	}
	// A replica that stops writing says so: 0, which the alert ignores.
	m.LeaseCheckpointCurrent(time.Time{})
	stopped := strings.Replace(after, "seconds 1.9000000005e+09\n", "seconds 0\n", 1)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(stopped), names...); err != nil {
		t.Errorf("after the writer stopped: %v", err)
	}
}
