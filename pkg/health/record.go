package health

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// What a finished probe does to a proxy's state: the verdict, the
// thresholds, the event to the reconciler and the metrics.

// record applies one probe result: counters, verdict, and — only when status
// would change — an event. Everything happens under the one mutex, so the
// reconciler's Snapshot read after the event sees the new value.
func (e *Engine) record(ctx context.Context, j job, latency time.Duration, probeErr error, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := j.target.Key
	st := e.states[key]
	if st != j.st {
		return // pruned or replaced while probing: the result is about another instance
	}
	st.inFlight = false
	ok := probeErr == nil
	e.probes.Add(1)
	if !ok {
		e.failures.Add(1)
	}
	e.opts.Metrics.ObserveProbe(key.String(), latency, ok)

	hc := st.hc
	if ok {
		st.consecOK, st.consecFail = st.consecOK+1, 0
		st.lastOKLatency = latency
	} else {
		st.consecOK, st.consecFail = 0, st.consecFail+1
		if pe, isProbeErr := probeErr.(*ProbeError); isProbeErr {
			// The library's words, for whoever runs the operator only: the
			// status and Events get ours (ProbeError).
			log.FromContext(ctx).V(1).Info("probe failed", "proxy", key, "error", pe.Error(), "cause", pe.Cause.Error())
		}
	}
	switch {
	case ok && (!st.hasVerdict || !st.healthy) && st.consecOK >= hc.SuccessThreshold:
		st.hasVerdict, st.healthy = true, true
	case !ok && (!st.hasVerdict || st.healthy) && st.consecFail >= hc.FailureThreshold:
		st.hasVerdict, st.healthy = true, false
	}
	if !st.hasVerdict {
		return
	}

	var why string
	switch {
	case !st.reported:
		why = "firstVerdict"
	case st.reportedHealthy != st.healthy:
		why = "thresholdFlip"
	case st.healthy && ok && latencyChanged(st.reportedLatency, latency) &&
		now.Sub(st.reportedAt) >= e.opts.MinReportInterval:
		// Only while healthy: a below-threshold success streak of a proxy
		// still reported unhealthy must not emit latency updates.
		why = "latencyChange"
	default:
		return
	}

	snap := &Snapshot{Healthy: st.healthy, CheckedAt: now, ProxyURL: j.target.ProxyURL}
	if st.healthy {
		snap.Latency = st.lastOKLatency
		snap.Reason = crawlv1alpha1.ReasonProbeSucceeded
		snap.Message = fmt.Sprintf("probe of %s through %s answered %d", hc.URL, j.target.ProxyURL, hc.ExpectedStatus)
	} else {
		snap.Reason = crawlv1alpha1.ReasonProbeFailed
		msg := "probe failed"
		if probeErr != nil {
			msg = probeErr.Error()
		}
		snap.Message = truncate(fmt.Sprintf("%d probes in a row of %s through %s failed; last: %s",
			st.consecFail, hc.URL, j.target.ProxyURL, msg), maxMessageLen)
	}
	ev := HealthEvent{Object: &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
	select {
	case e.events <- ev:
		e.sent.Add(1)
		st.reported, st.reportedHealthy = true, st.healthy
		st.reportedLatency, st.reportedAt = snap.Latency, now
		st.snap = snap
		log.FromContext(ctx).V(1).Info("health reported", "proxy", key, "healthy", st.healthy, "why", why, "latency", snap.Latency)
	default:
		// Markers stay put, so the next probe of this proxy retries.
		e.dropped.Add(1)
		log.FromContext(ctx).V(1).Info("health event dropped: channel full", "proxy", key, "why", why)
	}
}

// randomJitter returns a uniformly random duration in [0, d), or 0.
func randomJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// latencyChanged reports whether latency moved more than max(20ms, 50%) away
// from the reported one.
func latencyChanged(reported, latency time.Duration) bool {
	delta := latency - reported
	if delta < 0 {
		delta = -delta
	}
	limit := max(minLatencyDelta, time.Duration(float64(reported)*latencyDeltaFraction))
	return delta > limit
}

// copyHealthCheck detaches hc from the (possibly shared cache) object.
func copyHealthCheck(hc crawlv1alpha1.HealthCheck) crawlv1alpha1.HealthCheck {
	if hc.TLS != nil {
		t := *hc.TLS
		hc.TLS = &t
	}
	return hc
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary: the message must stay valid UTF-8.
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}

type noMetrics struct{}

func (noMetrics) ObserveProbe(string, time.Duration, bool) {}
func (noMetrics) Forget(string)                            {}
