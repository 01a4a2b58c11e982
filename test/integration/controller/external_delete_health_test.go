package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/health"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// External mode: no provider calls, no finalizer; the endpoint host is the
// address; health turns it Ready; deletion is immediate.
func TestExternalMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.create(e.external("ext", "127.0.0.7", 8888))
	p := e.waitCondition("ext", crawlv1alpha1.ConditionProvisioned, metav1.ConditionTrue, crawlv1alpha1.ReasonExternalEndpoint)
	if p.Status.IP != "127.0.0.7" || p.Status.ProviderID != "" {
		t.Errorf("status ip=%q providerID=%q, want 127.0.0.7 and none", p.Status.IP, p.Status.ProviderID)
	}
	if len(p.Finalizers) != 0 {
		t.Errorf("finalizers = %v, want none in External mode", p.Finalizers)
	}

	at := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	e.health.set(e.key("ext"), health.Snapshot{Healthy: true, Latency: 42 * time.Millisecond, CheckedAt: at, ProxyURL: "http://127.0.0.7:8888"})
	e.notify("ext")
	p = e.waitProxy("ext", "Ready", func(p *crawlv1alpha1.Proxy) bool { return p.Status.Phase == crawlv1alpha1.PhaseReady })
	if p.Status.LatencyMillis == nil || *p.Status.LatencyMillis != 42 {
		t.Errorf("latencyMillis = %v, want 42", p.Status.LatencyMillis)
	}
	if p.Status.LastHealthCheckTime == nil || !p.Status.LastHealthCheckTime.Time.Equal(at.Truncate(time.Second)) {
		t.Errorf("lastHealthCheckTime = %v, want %v", p.Status.LastHealthCheckTime, at.Truncate(time.Second))
	}

	if err := e.c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	e.waitGone("ext")
	if n := len(e.fake.Calls()); n != 0 {
		t.Errorf("provider calls = %d in External mode, want 0", n)
	}
}

// A permanent error while deleting is shown and retried, never latched; the
// object goes once the provider lets the instance go.
func TestDeletePermanentErrorKeepsRetrying(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	h := e.watch("del")
	e.create(e.managed("del"))
	p := e.waitProvisioned("del")
	id := p.Status.ProviderID

	const failures = 3
	for range failures {
		e.fake.InjectError(provider.OpDelete, provider.Permanent(errors.New("403 instance protected")))
	}
	if err := e.c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	e.waitGone("del")
	if n := e.calls(provider.OpDelete); n < failures+1 {
		t.Errorf("delete calls = %d, want at least %d (retried past the permanent errors)", n, failures+1)
	}
	if _, ok := e.fake.Instance(id); ok {
		t.Errorf("instance survived")
	}
	if !h.sawState("Deleting PermanentError") {
		t.Errorf("the permanent error was never shown while deleting; history: %s", h)
	}
	if h.sawPhase(crawlv1alpha1.PhaseFailed) {
		t.Errorf("deletion latched Failed; history: %s", h)
	}
	e.waitEvent("del", corev1.EventTypeWarning, controller.EventReasonPermanentError)
	e.waitEvent("del", corev1.EventTypeNormal, controller.EventReasonDeleted)
}

// An instance already gone when the Proxy is deleted: no Delete call, the
// finalizer is released.
func TestDeleteInstanceAlreadyGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{intervals: controller.Intervals{DriftPoll: time.Hour}})
	e.create(e.managed("gone"))
	p := e.waitProvisioned("gone")
	e.fake.Remove(p.Status.ProviderID)
	e.fake.ResetCalls()
	if err := e.c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	e.waitGone("gone")
	if n := e.calls(provider.OpDelete); n != 0 {
		t.Errorf("delete calls = %d for a missing instance, want 0", n)
	}
	if n := e.calls(provider.OpCreate); n != 0 {
		t.Errorf("create calls = %d while deleting, want 0", n)
	}
}

// Health snapshots become the Healthy condition: Ready, Unhealthy (with a
// Warning), Recovered; a snapshot about another address is ignored.
func TestHealthRepresentation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{intervals: controller.Intervals{DriftPoll: time.Hour}})
	e.create(e.managed("hp"))
	p := e.waitProvisioned("hp")
	url := p.ProxyURL()
	key := e.key("hp")

	// Negative control: a verdict about a previous address is not applied.
	e.health.set(key, health.Snapshot{Healthy: true, ProxyURL: "http://192.0.2.250:3128"})
	e.notify("hp")
	time.Sleep(time.Second)
	if got := e.get("hp"); got.Status.Phase != crawlv1alpha1.PhaseProvisioning || meta.FindStatusCondition(got.Status.Conditions, crawlv1alpha1.ConditionHealthy) != nil {
		t.Fatalf("stale snapshot applied: %s", describe(got))
	}

	e.health.set(key, health.Snapshot{Healthy: true, Latency: 15 * time.Millisecond, CheckedAt: time.Now(), ProxyURL: url})
	e.notify("hp")
	p = e.waitCondition("hp", crawlv1alpha1.ConditionHealthy, metav1.ConditionTrue, crawlv1alpha1.ReasonProbeSucceeded)
	if p.Status.Phase != crawlv1alpha1.PhaseReady || p.Status.LatencyMillis == nil || *p.Status.LatencyMillis != 15 {
		t.Errorf("after healthy: %s latency %v", describe(p), p.Status.LatencyMillis)
	}

	e.health.set(key, health.Snapshot{Healthy: false, Message: "probe timed out", CheckedAt: time.Now(), ProxyURL: url})
	e.notify("hp")
	p = e.waitCondition("hp", crawlv1alpha1.ConditionHealthy, metav1.ConditionFalse, crawlv1alpha1.ReasonProbeFailed)
	if p.Status.Phase != crawlv1alpha1.PhaseUnhealthy {
		t.Errorf("phase = %q, want Unhealthy", p.Status.Phase)
	}
	e.waitEvent("hp", corev1.EventTypeWarning, controller.EventReasonUnhealthy)

	e.health.set(key, health.Snapshot{Healthy: true, Latency: 20 * time.Millisecond, CheckedAt: time.Now(), ProxyURL: url})
	e.notify("hp")
	e.waitProxy("hp", "Ready again", func(p *crawlv1alpha1.Proxy) bool { return p.Status.Phase == crawlv1alpha1.PhaseReady })
	e.waitEvent("hp", corev1.EventTypeNormal, controller.EventReasonRecovered)
}

// At steady state a Proxy costs zero writes: over one real minute, with the
// drift poll at 1 s so about sixty reconciles (each a provider Get) happen,
// plus health notifications carrying an unchanged verdict, the object is
// never modified. Negative control: a real change (new IP) is a write the
// same watch sees.
func TestSteadyStateMakesNoWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("one-minute test")
	}
	t.Parallel()
	e := newEnv(t, envOptions{intervals: controller.Intervals{DriftPoll: time.Second}})
	e.create(e.managed("steady"))
	p := e.waitProvisioned("steady")
	e.health.set(e.key("steady"), health.Snapshot{Healthy: true, Latency: 30 * time.Millisecond, CheckedAt: time.Now(), ProxyURL: p.ProxyURL()})
	e.notify("steady")
	e.waitProxy("steady", "Ready", func(p *crawlv1alpha1.Proxy) bool { return p.Status.Phase == crawlv1alpha1.PhaseReady })
	time.Sleep(2 * time.Second) // let the reconcile that followed the last write finish

	h := e.watch("steady")
	time.Sleep(500 * time.Millisecond) // the watch's ADDED event for the current state
	getsBefore := e.calls(provider.OpGet)
	start := time.Now()
	for i := 0; time.Since(start) < time.Minute; i++ {
		if i%10 == 0 {
			e.notify("steady") // same verdict: a reconcile, no write
		}
		time.Sleep(time.Second)
	}
	gets := e.calls(provider.OpGet) - getsBefore
	writes := h.modifications()
	t.Logf("steady state over %s: %d reconciles with a provider Get, %d writes to the Proxy", time.Since(start).Round(time.Second), gets, writes)
	if writes != 0 {
		t.Errorf("steady state wrote the Proxy %d times in a minute, want 0; history: %s", writes, h)
	}
	if gets < 30 {
		t.Errorf("only %d drift polls in a minute with DriftPoll 1s; the test would prove nothing", gets)
	}

	// Negative control: a real change is written and seen by the watch.
	if err := e.fake.SetIP(p.Status.ProviderID, "192.0.2.77"); err != nil {
		t.Fatal(err)
	}
	e.eventually(10*time.Second, "the IP change to be written", func() (bool, string) {
		return h.modifications() > 0, h.String()
	})
	if got := e.get("steady"); got.Status.IP != "192.0.2.77" {
		t.Errorf("ip = %q after the change", got.Status.IP)
	}
}

// A verdict does not follow a proxy to another address (an External
// proxy's port patched to kube-apiserver's was leased at once with the new
// URL): from the moment the endpoint changes, the lease store does not offer
// the proxy, and the Healthy condition is cleared, until a verdict about the
// new address comes.
func TestEndpointChangeResetsHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.create(e.external("moves", "127.0.0.7", 8888))
	e.waitCondition("moves", crawlv1alpha1.ConditionProvisioned, metav1.ConditionTrue, crawlv1alpha1.ReasonExternalEndpoint)
	e.health.set(e.key("moves"), health.Snapshot{Healthy: true, CheckedAt: time.Now(), ProxyURL: "http://127.0.0.7:8888"})
	e.notify("moves")
	p := e.waitProxy("moves", "Ready", func(p *crawlv1alpha1.Proxy) bool { return p.Status.Phase == crawlv1alpha1.PhaseReady })
	if p.Status.ProbedURL != "http://127.0.0.7:8888" || !lease.ProxyInfoFromProxy(p).Healthy {
		t.Fatalf("healthy at its address: probedURL %q, offered %v", p.Status.ProbedURL, lease.ProxyInfoFromProxy(p).Healthy)
	}

	p.Spec.Endpoint.Port = 6443
	if err := e.c.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	// What the store's informer sees first: the spec changed, the status not
	// yet.
	if lease.ProxyInfoFromProxy(p).Healthy {
		t.Error("the moved proxy is offered with the verdict about its old address")
	}
	p = e.waitProxy("moves", "health cleared", func(p *crawlv1alpha1.Proxy) bool {
		return meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy) == nil
	})
	if p.Status.Phase == crawlv1alpha1.PhaseReady || p.Status.ProbedURL != "" || lease.ProxyInfoFromProxy(p).Healthy {
		t.Errorf("after the move: %s, probedURL %q, offered %v", describe(p), p.Status.ProbedURL, lease.ProxyInfoFromProxy(p).Healthy)
	}

	// The old verdict is still the engine's last word: not applied.
	e.notify("moves")
	time.Sleep(500 * time.Millisecond)
	if got := e.get("moves"); meta.FindStatusCondition(got.Status.Conditions, crawlv1alpha1.ConditionHealthy) != nil {
		t.Fatalf("the verdict about the old address was applied again: %s", describe(got))
	}
	e.health.set(e.key("moves"), health.Snapshot{Healthy: true, CheckedAt: time.Now(), ProxyURL: "http://127.0.0.7:6443"})
	e.notify("moves")
	p = e.waitProxy("moves", "Ready at the new address", func(p *crawlv1alpha1.Proxy) bool { return p.Status.Phase == crawlv1alpha1.PhaseReady })
	if p.Status.ProbedURL != "http://127.0.0.7:6443" || !lease.ProxyInfoFromProxy(p).Healthy {
		t.Errorf("healthy at its new address: probedURL %q, offered %v", p.Status.ProbedURL, lease.ProxyInfoFromProxy(p).Healthy)
	}
}
