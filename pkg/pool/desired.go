package pool

import (
	"time"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// Defaults of spec.autoscaling (kept equal to the CRD's by a test).
const (
	DefaultTargetUtilization     = 80
	DefaultScaleDownDelaySeconds = 300
)

// Input is what a pool's desired size depends on.
type Input struct {
	// Replicas is spec.replicas: the size without autoscaling, and the size
	// the pool has now with it (the operator keeps it at the decision).
	Replicas int32
	// Autoscaling is spec.autoscaling (nil: fixed size).
	Autoscaling *crawlv1alpha1.PoolAutoscaling
	// Held are the live leases on the pool's Proxies; Waiting the requests
	// waiting for a lease one of them could serve.
	Held, Waiting int
	// Owned is how many Proxies the pool has (being deleted ones aside): a
	// smaller size that removes none of them applies at once.
	Owned int
	// PerProxy is how many leases one Proxy takes (--max-leases-per-proxy).
	PerProxy int
	// LowSince is when demand first fell below Replicas (zero: it has not).
	LowSince time.Time
	Now      time.Time
}

// Decision is the desired size, why, and the LowSince to remember.
type Decision struct {
	Replicas int32
	Reason   string
	LowSince time.Time
}

// Desired sizes a pool. Without autoscaling it is spec.replicas. With it,
// demand (leases held plus requests waiting) over targetUtilization of a
// Proxy's capacity, rounded up, within [minReplicas, maxReplicas]; a larger
// size applies at once (requests waiting on an empty pool grow it from zero),
// a smaller one only after demand stayed below the current size for
// scaleDownDelaySeconds, unless it removes no Proxy the pool has (a new pool
// with spec.replicas at its default of 1 and minReplicas 0 creates nothing).
func Desired(in Input) Decision {
	a := in.Autoscaling
	if a == nil {
		return Decision{Replicas: in.Replicas, Reason: crawlv1alpha1.DesiredFixed}
	}
	target := int64(DefaultTargetUtilization)
	if a.TargetUtilization != nil && *a.TargetUtilization > 0 {
		target = int64(*a.TargetUtilization)
	}
	per := int64(max(in.PerProxy, 1))
	demand := int64(in.Held) + int64(in.Waiting)
	// Proxies needed so that demand is at most target% of their capacity.
	need := (demand*100 + target*per - 1) / (target * per)
	reason := crawlv1alpha1.DesiredDemand
	var lo int64
	if a.MinReplicas != nil {
		lo = int64(*a.MinReplicas)
	}
	hi := int64(a.MaxReplicas)
	switch {
	case need < lo:
		need, reason = lo, crawlv1alpha1.DesiredMin
	case need > hi:
		need, reason = hi, crawlv1alpha1.DesiredMax
	}
	n := int32(need)
	if n >= in.Replicas || int64(in.Owned) <= need {
		return Decision{Replicas: n, Reason: reason}
	}
	low := in.LowSince
	if low.IsZero() {
		low = in.Now
	}
	delay := time.Duration(DefaultScaleDownDelaySeconds) * time.Second
	if a.ScaleDownDelaySeconds != nil {
		delay = time.Duration(*a.ScaleDownDelaySeconds) * time.Second
	}
	if in.Now.Sub(low) < delay {
		return Decision{Replicas: in.Replicas, Reason: crawlv1alpha1.DesiredScaleDownDelay, LowSince: low}
	}
	return Decision{Replicas: n, Reason: reason}
}
