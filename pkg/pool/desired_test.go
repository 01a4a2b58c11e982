package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func auto(lo, hi, target, delay int32) *crawlv1alpha1.PoolAutoscaling {
	return &crawlv1alpha1.PoolAutoscaling{MinReplicas: ptr.To(lo), MaxReplicas: hi, TargetUtilization: ptr.To(target), ScaleDownDelaySeconds: ptr.To(delay)}
}

func TestDesired(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Input
		want Decision
	}{
		{"fixed size", Input{Replicas: 3, Held: 50, Now: t0}, Decision{3, crawlv1alpha1.DesiredFixed, time.Time{}}},
		{"scale from zero: one waiting request", Input{Replicas: 0, Autoscaling: auto(0, 10, 100, 60), Waiting: 1, PerProxy: 1, Now: t0},
			Decision{1, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"one request at 80%: two proxies (1/2 ≤ 80%)", Input{Replicas: 0, Autoscaling: auto(0, 10, 80, 60), Waiting: 1, PerProxy: 1, Now: t0},
			Decision{2, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"20 waiting, exclusive leases, 100%", Input{Replicas: 0, Autoscaling: auto(0, 50, 100, 60), Waiting: 20, PerProxy: 1, Now: t0},
			Decision{20, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"80% of 4 per proxy: 10 leases need 4", Input{Replicas: 2, Autoscaling: auto(0, 50, 80, 60), Held: 7, Waiting: 3, PerProxy: 4, Now: t0},
			Decision{4, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"clamped to max", Input{Replicas: 2, Autoscaling: auto(0, 5, 100, 60), Waiting: 20, PerProxy: 1, Now: t0},
			Decision{5, crawlv1alpha1.DesiredMax, time.Time{}}},
		{"idle, held at min", Input{Replicas: 2, Autoscaling: auto(2, 5, 80, 0), PerProxy: 1, Now: t0},
			Decision{2, crawlv1alpha1.DesiredMin, time.Time{}}},
		{"demand fell: held during the delay", Input{Replicas: 5, Autoscaling: auto(0, 10, 100, 60), Held: 1, PerProxy: 1, Owned: 5, Now: t0},
			Decision{5, crawlv1alpha1.DesiredScaleDownDelay, t0}},
		{"a new pool at the default spec.replicas 1, none made yet: to zero at once", Input{Replicas: 1, Autoscaling: auto(0, 10, 80, 300), PerProxy: 1, Now: t0},
			Decision{0, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"the same with its one Proxy made: the delay keeps it", Input{Replicas: 1, Autoscaling: auto(0, 10, 80, 300), PerProxy: 1, Owned: 1, Now: t0},
			Decision{1, crawlv1alpha1.DesiredScaleDownDelay, t0}},
		{"smaller, removing none of the 2 it has: at once", Input{Replicas: 5, Autoscaling: auto(0, 10, 100, 60), Held: 2, PerProxy: 1, Owned: 2, Now: t0},
			Decision{2, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"demand stayed low past the delay", Input{Replicas: 5, Autoscaling: auto(0, 10, 100, 60), Held: 1, PerProxy: 1, LowSince: t0, Now: t0.Add(time.Minute)},
			Decision{1, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"idle past the delay: to zero", Input{Replicas: 3, Autoscaling: auto(0, 10, 80, 60), PerProxy: 1, LowSince: t0, Now: t0.Add(2 * time.Minute)},
			Decision{0, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"demand back up resets the delay", Input{Replicas: 3, Autoscaling: auto(0, 10, 100, 60), Held: 3, PerProxy: 1, LowSince: t0, Now: t0.Add(30 * time.Second)},
			Decision{3, crawlv1alpha1.DesiredDemand, time.Time{}}},
		{"defaults: 80%, 300s", Input{Replicas: 4, Autoscaling: &crawlv1alpha1.PoolAutoscaling{MaxReplicas: 10}, Held: 4, PerProxy: 1, LowSince: t0, Now: t0.Add(299 * time.Second)},
			Decision{5, crawlv1alpha1.DesiredDemand, time.Time{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Desired(tc.in)); d != "" {
				t.Errorf("Desired (-want +got):\n%s", d)
			}
		})
	}
}

// Negative controls: the table catches a Desired that ignores waiting
// requests (no scale from zero) or the delay (flapping).
func TestDesiredNegativeControls(t *testing.T) {
	ignoresWaiting := func(in Input) Decision { in.Waiting = 0; return Desired(in) }
	if got := ignoresWaiting(Input{Replicas: 0, Autoscaling: auto(0, 10, 100, 60), Waiting: 1, PerProxy: 1, Now: t0}); got.Replicas != 0 {
		t.Fatalf("the broken version scales from zero: %+v", got)
	}
	if got := Desired(Input{Replicas: 0, Autoscaling: auto(0, 10, 100, 60), Waiting: 1, PerProxy: 1, Now: t0}); got.Replicas != 1 {
		t.Errorf("a waiting request does not grow an empty pool: %+v", got)
	}
	noDelay := func(in Input) Decision { in.Autoscaling.ScaleDownDelaySeconds = ptr.To[int32](0); return Desired(in) }
	in := Input{Replicas: 5, Autoscaling: auto(0, 10, 100, 60), Held: 1, PerProxy: 1, Owned: 5, Now: t0}
	if got := noDelay(in); got.Replicas != 1 {
		t.Fatalf("the broken version waits: %+v", got)
	}
	if got := Desired(Input{Replicas: 5, Autoscaling: auto(0, 10, 100, 60), Held: 1, PerProxy: 1, Owned: 5, Now: t0}); got.Replicas != 5 {
		t.Errorf("demand fell and the pool shrank at once: %+v", got)
	}
}
