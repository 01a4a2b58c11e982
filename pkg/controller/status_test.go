package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason}
}

func TestComputePhase(t *testing.T) {
	now := metav1.Now()
	prov := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return cond(crawlv1alpha1.ConditionProvisioned, s, reason)
	}
	healthy := func(s metav1.ConditionStatus) metav1.Condition {
		return cond(crawlv1alpha1.ConditionHealthy, s, crawlv1alpha1.ReasonProbeSucceeded)
	}
	tests := []struct {
		name     string
		deleting bool
		conds    []metav1.Condition
		want     crawlv1alpha1.ProxyPhase
	}{
		{"no conditions", false, nil, crawlv1alpha1.PhasePending},
		{"deleting wins over everything", true, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError)}, crawlv1alpha1.PhaseDeleting},
		{"permanent error", false, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError)}, crawlv1alpha1.PhaseFailed},
		{"provisioned and healthy", false, []metav1.Condition{prov(metav1.ConditionTrue, crawlv1alpha1.ReasonCreated), healthy(metav1.ConditionTrue)}, crawlv1alpha1.PhaseReady},
		{"external and healthy", false, []metav1.Condition{prov(metav1.ConditionTrue, crawlv1alpha1.ReasonExternalEndpoint), healthy(metav1.ConditionTrue)}, crawlv1alpha1.PhaseReady},
		{"provisioned and unhealthy", false, []metav1.Condition{prov(metav1.ConditionTrue, crawlv1alpha1.ReasonCreated), healthy(metav1.ConditionFalse)}, crawlv1alpha1.PhaseUnhealthy},
		{"provisioned, no verdict", false, []metav1.Condition{prov(metav1.ConditionTrue, crawlv1alpha1.ReasonCreated)}, crawlv1alpha1.PhaseProvisioning},
		{"provisioned, unknown verdict", false, []metav1.Condition{prov(metav1.ConditionTrue, crawlv1alpha1.ReasonCreated), healthy(metav1.ConditionUnknown)}, crawlv1alpha1.PhaseProvisioning},
		{"healthy but not provisioned is not Ready", false, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning), healthy(metav1.ConditionTrue)}, crawlv1alpha1.PhaseProvisioning},
		{"creating", false, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning)}, crawlv1alpha1.PhaseProvisioning},
		{"replacing", false, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonReplacing)}, crawlv1alpha1.PhaseProvisioning},
		{"stopped, recreating", false, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonInstanceStopped)}, crawlv1alpha1.PhaseProvisioning},
		{"quota wait is not Failed", false, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonQuotaExceeded)}, crawlv1alpha1.PhasePending},
		{"cloud-init error", false, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonCloudInitError)}, crawlv1alpha1.PhasePending},
		{"transient provider error", false, []metav1.Condition{prov(metav1.ConditionFalse, crawlv1alpha1.ReasonProviderError)}, crawlv1alpha1.PhasePending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &crawlv1alpha1.Proxy{Status: crawlv1alpha1.ProxyStatus{Conditions: tt.conds}}
			if tt.deleting {
				p.DeletionTimestamp = &now
			}
			if got := computePhase(p); got != tt.want {
				t.Errorf("computePhase = %q, want %q", got, tt.want)
			}
		})
	}
}

// setCondition keeps lastTransitionTime while the status is unchanged (so a
// repeated reconcile stages an identical status) and reports changes.
func TestSetConditionTransitions(t *testing.T) {
	clk := &stepClock{t: time.Date(2030, 1, 1, 0, 0, 0, 999, time.UTC)}
	r := &ProxyReconciler{Clock: clk}
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Generation: 3}}

	if !r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning, "a") {
		t.Fatal("first set reported no change")
	}
	first := p.Status.Conditions[0].LastTransitionTime
	if !first.Time.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("lastTransitionTime = %v, want the clock truncated to seconds", first)
	}
	clk.t = clk.t.Add(time.Minute)
	if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning, "a") {
		t.Error("identical set reported a change")
	}
	if r.setProvisioned(p, metav1.ConditionFalse, crawlv1alpha1.ReasonReplacing, "a") != true {
		t.Error("reason change not reported")
	}
	if got := p.Status.Conditions[0].LastTransitionTime; !got.Equal(&first) {
		t.Errorf("lastTransitionTime moved on a reason change without a status flip: %v → %v", first, got)
	}
	r.setProvisioned(p, metav1.ConditionTrue, crawlv1alpha1.ReasonCreated, "b")
	if got := p.Status.Conditions[0].LastTransitionTime; got.Equal(&first) {
		t.Error("lastTransitionTime did not move on a status flip")
	}
	if diff := cmp.Diff(int64(3), p.Status.Conditions[0].ObservedGeneration); diff != "" {
		t.Error(diff)
	}
}

type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time                  { return c.t }
func (c *stepClock) Since(t time.Time) time.Duration { return c.t.Sub(t) }

func TestLatched(t *testing.T) {
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	if latched(p) {
		t.Fatal("latched without conditions")
	}
	c := cond(crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError)
	c.ObservedGeneration = 2
	p.Status.Conditions = []metav1.Condition{c}
	if !latched(p) {
		t.Fatal("not latched at the failing generation")
	}
	p.Generation = 3
	if latched(p) {
		t.Fatal("still latched after a spec edit")
	}
	p.Status.Conditions[0].Reason = crawlv1alpha1.ReasonQuotaExceeded
	p.Status.Conditions[0].ObservedGeneration = 3
	if latched(p) {
		t.Fatal("quota latched")
	}
}

func TestIntervalsWithDefaults(t *testing.T) {
	got := Intervals{DriftPoll: 7 * time.Second, QuotaRetry: -1}.WithDefaults()
	want := DefaultIntervals()
	want.DriftPoll = 7 * time.Second
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WithDefaults (-want +got):\n%s", diff)
	}
	if d := DefaultIntervals(); d.QuotaRetry != 5*time.Minute || d.RequeueNow != time.Second {
		t.Errorf("defaults %+v: quota retry must be 5m and requeue-now 1s", d)
	}
}

// The Ready condition follows the phase and only the phase: True exactly in
// phase Ready, with the phase as its reason, and a second pass over the same
// status changes nothing (so it adds no write at steady state).
func TestSetReadyFollowsPhase(t *testing.T) {
	r := &ProxyReconciler{}
	tests := []struct {
		phase      crawlv1alpha1.ProxyPhase
		wantStatus metav1.ConditionStatus
	}{
		{crawlv1alpha1.PhaseReady, metav1.ConditionTrue},
		{crawlv1alpha1.PhaseUnhealthy, metav1.ConditionFalse},
		{crawlv1alpha1.PhaseProvisioning, metav1.ConditionFalse},
		{crawlv1alpha1.PhaseFailed, metav1.ConditionFalse},
		{crawlv1alpha1.PhasePending, metav1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(string(tt.phase), func(t *testing.T) {
			p := &crawlv1alpha1.Proxy{Status: crawlv1alpha1.ProxyStatus{Phase: tt.phase}}
			r.setReady(p)
			var got []metav1.Condition
			for _, c := range p.Status.Conditions {
				got = append(got, cond(c.Type, c.Status, c.Reason))
			}
			want := []metav1.Condition{cond(crawlv1alpha1.ConditionReady, tt.wantStatus, string(tt.phase))}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			before := p.DeepCopy()
			r.setReady(p)
			if diff := cmp.Diff(before.Status, p.Status); diff != "" {
				t.Errorf("second setReady changed status (-before +after):\n%s", diff)
			}
		})
	}
}
