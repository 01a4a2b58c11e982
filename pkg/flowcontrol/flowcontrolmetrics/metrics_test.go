package flowcontrolmetrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
)

// oneSlot is a dispatcher with a single exclusive slot.
type oneSlot struct{ busy bool }

var _ flowcontrol.Dispatcher[struct{}, int] = (*oneSlot)(nil)

func (d *oneSlot) TryDispatch(string, struct{}) (int, flowcontrol.Verdict, error) {
	if d.busy {
		return 0, flowcontrol.Exhausted, nil
	}
	d.busy = true
	return 1, flowcontrol.Granted, nil
}
func (d *oneSlot) Held(string) int       { return 0 }
func (d *oneSlot) Release(int)           { d.busy = false }
func (d *oneSlot) NextChange() time.Time { return time.Time{} }

func TestMetricsThroughTheCore(t *testing.T) {
	m := New()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatalf("register: %v", err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	d := &oneSlot{}
	c := flowcontrol.NewCore(d, clk, flowcontrol.Options{Metrics: m, MaxQueuedPerFlow: 1})
	if o, _, _, _ := c.Enqueue(flowcontrol.Request[struct{}]{Flow: "a"}); o != flowcontrol.OutcomeDispatched {
		t.Fatalf("first: %v", o)
	}
	_, _, tk, _ := c.Enqueue(flowcontrol.Request[struct{}]{Flow: "b", Priority: 3})
	if o, _, _, _ := c.Enqueue(flowcontrol.Request[struct{}]{Flow: "b", Priority: 3}); o != flowcontrol.OutcomeRejectedCapacity {
		t.Fatalf("third: %v", o)
	}
	if got := testutil.ToFloat64(m.queueLength.WithLabelValues("3")); got != 1 {
		t.Errorf("queue length of band 3 = %v, want 1", got)
	}
	clk.Step(2 * time.Second)
	d.Release(1)
	c.OnCapacity()
	if tk.Outcome() != flowcontrol.OutcomeDispatched {
		t.Fatalf("waiter: %v", tk.Outcome())
	}

	want := `
# HELP proxy_operator_flowcontrol_queue_length Lease requests waiting for capacity, per priority band.
# TYPE proxy_operator_flowcontrol_queue_length gauge
proxy_operator_flowcontrol_queue_length{band="0"} 0
proxy_operator_flowcontrol_queue_length{band="3"} 0
# HELP proxy_operator_flowcontrol_requests_total Lease requests handled by flow control, by outcome.
# TYPE proxy_operator_flowcontrol_requests_total counter
proxy_operator_flowcontrol_requests_total{outcome="dispatched"} 2
proxy_operator_flowcontrol_requests_total{outcome="evicted_cancelled"} 0
proxy_operator_flowcontrol_requests_total{outcome="evicted_deadline"} 0
proxy_operator_flowcontrol_requests_total{outcome="evicted_other"} 0
proxy_operator_flowcontrol_requests_total{outcome="evicted_shutdown"} 0
proxy_operator_flowcontrol_requests_total{outcome="rejected_capacity"} 1
proxy_operator_flowcontrol_requests_total{outcome="rejected_other"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"proxy_operator_flowcontrol_queue_length", "proxy_operator_flowcontrol_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.wait); n != len(flowcontrol.Outcomes()) {
		t.Errorf("%d wait series, want one per outcome", n)
	}
	var pb dto.Metric
	if err := m.waitBy["dispatched"].(prometheus.Histogram).Write(&pb); err != nil {
		t.Fatal(err)
	}
	if h := pb.GetHistogram(); h.GetSampleSum() != 2 || h.GetSampleCount() != 2 {
		t.Errorf("dispatched wait: sum %v count %v, want 2s over 2 requests (0s and 2s)", h.GetSampleSum(), h.GetSampleCount())
	}

	m.FlowControlAbandoned()
	if got := testutil.ToFloat64(m.abandoned); got != 1 {
		t.Errorf("abandoned = %v, want 1", got)
	}
}

// Before any request, the default band's queue length is there at 0 (the
// dashboard's panel and the alerts query it), and only that band's.
func TestQueueLengthPresentFromTheStart(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(New()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP proxy_operator_flowcontrol_queue_length Lease requests waiting for capacity, per priority band.
# TYPE proxy_operator_flowcontrol_queue_length gauge
proxy_operator_flowcontrol_queue_length{band="0"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "proxy_operator_flowcontrol_queue_length"); err != nil {
		t.Error(err)
	}
}
