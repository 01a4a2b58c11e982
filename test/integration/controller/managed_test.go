package controller_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
)

// A Managed Proxy goes Pending → Provisioning → Provisioned, with the
// finalizer, the spec-hash annotation and the deterministic instance name;
// deleting it deletes the instance, then releases the object.
func TestManagedLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{fakeOptions: []fake.Option{fake.WithGetsUntilRunning(3), fake.WithGetsUntilGone(2)}})
	h := e.watch("web")
	e.create(e.managed("web"))

	p := e.waitProvisioned("web")
	wantID := fake.ProviderID(provider.NameFromUID(p.UID))
	inst, ok := e.fake.Instance(wantID)
	if !ok {
		t.Fatalf("no fake instance %s; instances: %v", wantID, e.fake.Instances())
	}
	if p.Status.ProviderID != wantID || p.Status.IP != inst.IP || p.Status.IP == "" {
		t.Errorf("status providerID=%q ip=%q, want %q and %q", p.Status.ProviderID, p.Status.IP, wantID, inst.IP)
	}
	if !controllerutil.ContainsFinalizer(p, crawlv1alpha1.FinalizerName) {
		t.Errorf("finalizers = %v, want %s", p.Finalizers, crawlv1alpha1.FinalizerName)
	}
	if got, want := p.Annotations[crawlv1alpha1.SpecHashAnnotation], controller.SpecHash(&p.Spec, "", nil); got != want {
		t.Errorf("spec-hash annotation = %q, want %q", got, want)
	}
	// Provisioned but never probed: not yet Ready.
	if p.Status.Phase != crawlv1alpha1.PhaseProvisioning {
		t.Errorf("phase = %q, want Provisioning until a health verdict", p.Status.Phase)
	}
	creates := e.fake.CallsOf(provider.OpCreate)
	if len(creates) != 1 {
		t.Fatalf("create calls = %d, want 1", len(creates))
	}
	req := creates[0].Request
	if diff := cmp.Diff(provider.CreateRequest{
		Name: provider.NameFromUID(p.UID), Tag: provider.DefaultTag, OwnerUID: p.UID, Namespace: e.ns,
	}, provider.CreateRequest{Name: req.Name, Tag: req.Tag, OwnerUID: req.OwnerUID, Namespace: req.Namespace, CloudInit: req.CloudInit}); diff != "" {
		t.Errorf("create request (-want +got):\n%s", diff)
	}
	if req.Proxy == nil || req.Proxy.Attributes["region"] != "local" {
		t.Errorf("create request carries spec %+v, want the Proxy's spec", req.Proxy)
	}
	// The Get polls passed through Provisioning before Running.
	if !h.sawState("Provisioning Provisioning") {
		t.Errorf("never saw phase Provisioning with Provisioned=False/Provisioning; history: %s", h)
	}
	e.waitEvent("web", corev1.EventTypeNormal, controller.EventReasonProvisioning)
	e.waitEvent("web", corev1.EventTypeNormal, controller.EventReasonCreated)

	if err := e.c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	e.waitGone("web")
	if _, ok := e.fake.Instance(wantID); ok {
		t.Errorf("instance %s still exists after the Proxy is gone", wantID)
	}
	if e.calls(provider.OpDelete) < 1 {
		t.Errorf("no provider Delete call")
	}
	if !h.sawPhase(crawlv1alpha1.PhaseDeleting) {
		t.Errorf("never saw phase Deleting; history: %s", h)
	}
	e.waitEvent("web", corev1.EventTypeNormal, controller.EventReasonDeleting)
	e.waitEvent("web", corev1.EventTypeNormal, controller.EventReasonDeleted)
}

// Quota exhaustion is a wait: QuotaExceeded condition, phase Pending (never
// Failed), a retry after QuotaRetry and not on the fast error backoff.
func TestQuotaWaitsWithoutFailing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.fake.InjectError(provider.OpCreate, provider.QuotaExceeded(errors.New("CPUS quota exhausted in region")))
	h := e.watch("q")
	e.create(e.managed("q"))

	p := e.waitCondition("q", crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, crawlv1alpha1.ReasonQuotaExceeded)
	seen := time.Now()
	if p.Status.Phase != crawlv1alpha1.PhasePending {
		t.Errorf("phase = %q, want Pending while waiting for quota", p.Status.Phase)
	}
	e.waitEvent("q", corev1.EventTypeWarning, controller.EventReasonQuotaExceeded)

	// The error backoff would have retried within milliseconds; the quota
	// wait does not retry before QuotaRetry.
	time.Sleep(e.intervals.QuotaRetry / 2)
	if n := e.calls(provider.OpCreate); n != 1 {
		t.Fatalf("create calls %s after quota = %d, want 1 (no backoff retries)", time.Since(seen), n)
	}
	e.waitProvisioned("q")
	if n := e.calls(provider.OpCreate); n != 2 {
		t.Errorf("create calls = %d, want 2 (one refused, one after the wait)", n)
	}
	if h.sawPhase(crawlv1alpha1.PhaseFailed) {
		t.Errorf("quota made the Proxy Failed; history: %s", h)
	}
}

// A permanent error latches Failed for the generation: nothing retries it,
// not even a metadata-only change, until the spec changes.
func TestPermanentErrorLatchesPerGeneration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.fake.InjectError(provider.OpCreate, provider.Permanent(errors.New("machine type does not exist")))
	e.create(e.managed("perm"))

	p := e.waitCondition("perm", crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError)
	if p.Status.Phase != crawlv1alpha1.PhaseFailed {
		t.Errorf("phase = %q, want Failed", p.Status.Phase)
	}
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	if c.ObservedGeneration != p.Generation || !strings.Contains(c.Message, "machine type does not exist") {
		t.Errorf("condition = %+v, want the error at generation %d", c, p.Generation)
	}
	e.waitEvent("perm", corev1.EventTypeWarning, controller.EventReasonPermanentError)

	// A metadata change re-runs the reconciler (annotations pass the
	// predicate), and a health notification enqueues it too: still latched.
	e.update("perm", func(p *crawlv1alpha1.Proxy) { metav1.SetMetaDataAnnotation(&p.ObjectMeta, "poke", "1") })
	e.notify("perm")
	time.Sleep(2 * time.Second)
	if n := e.calls(provider.OpCreate); n != 1 {
		t.Fatalf("create calls while latched = %d, want 1", n)
	}
	if got := e.get("perm").Status.Phase; got != crawlv1alpha1.PhaseFailed {
		t.Fatalf("phase while latched = %q, want Failed", got)
	}

	// A spec edit bumps the generation: the latch opens and provisioning
	// succeeds (the fake has no more injected errors).
	e.update("perm", func(p *crawlv1alpha1.Proxy) { p.Spec.Attributes["tier"] = "b" })
	p = e.waitProvisioned("perm")
	if n := e.calls(provider.OpCreate); n != 2 {
		t.Errorf("create calls after the spec edit = %d, want 2", n)
	}
	if p.Status.Phase == crawlv1alpha1.PhaseFailed {
		t.Errorf("still Failed after recovery")
	}
}

// Transient errors go back to the workqueue's exponential backoff: fast
// retries, ProviderError visible meanwhile, success once they stop.
func TestTransientErrorsBackOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	const failures = 5
	for range failures {
		e.fake.InjectError(provider.OpCreate, provider.Transient(errors.New("503 backend unavailable")))
	}
	h := e.watch("tr")
	start := time.Now()
	e.create(e.managed("tr"))
	e.waitProvisioned("tr")
	elapsed := time.Since(start)

	creates := e.fake.CallsOf(provider.OpCreate)
	if len(creates) != failures+1 {
		t.Fatalf("create calls = %d, want %d", len(creates), failures+1)
	}
	for i, c := range creates[:failures] {
		if !provider.IsTransient(c.Err) {
			t.Errorf("create %d error = %v, want transient", i, c.Err)
		}
	}
	// Backoff from 5 ms doubles: five retries take well under a second of
	// waiting; the quota wait alone would be QuotaRetry per attempt.
	if elapsed >= e.intervals.QuotaRetry {
		t.Errorf("took %s, want well under QuotaRetry %s (backoff, not the slow wait)", elapsed, e.intervals.QuotaRetry)
	}
	if !h.sawState("Pending ProviderError") {
		t.Errorf("never saw Pending/ProviderError while retrying; history: %s", h)
	}
	e.waitEvent("tr", corev1.EventTypeWarning, controller.EventReasonProviderError)
	if h.sawPhase(crawlv1alpha1.PhaseFailed) {
		t.Errorf("transient errors made the Proxy Failed; history: %s", h)
	}
}

// An unknown provider is permanent (Failed) and recovers on a spec edit that
// names a registered one.
func TestUnknownProvider(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	p := e.managed("unk")
	p.Spec.Provider = "nope"
	e.create(p)
	p = e.waitCondition("unk", crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError)
	if p.Status.Phase != crawlv1alpha1.PhaseFailed {
		t.Errorf("phase = %q, want Failed", p.Status.Phase)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned); !strings.Contains(c.Message, `"nope"`) {
		t.Errorf("message %q does not name the provider", c.Message)
	}
	e.waitEvent("unk", corev1.EventTypeWarning, controller.EventReasonPermanentError)
	if n := len(e.fake.Calls()); n != 0 {
		t.Errorf("fake provider calls = %d, want 0", n)
	}
	e.update("unk", func(p *crawlv1alpha1.Proxy) { p.Spec.Provider = fakeProviderName })
	e.waitProvisioned("unk")
}

// Editing provider-relevant spec replaces the instance (delete, poll until
// NotFound, recreate under the same name); editing attributes does not; a
// missing annotation is adopted without touching the instance.
func TestSpecChangeReplacesAndAttributesDoNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{fakeOptions: []fake.Option{fake.WithGetsUntilGone(2)}})
	p := e.managed("rep")
	p.Spec.CloudInit = &crawlv1alpha1.CloudInit{UserData: "#cloud-config\nv: 1\n"}
	e.create(p)
	p = e.waitProvisioned("rep")
	id := p.Status.ProviderID
	oldHash := p.Annotations[crawlv1alpha1.SpecHashAnnotation]

	// Attributes and health check are not part of the hash.
	e.update("rep", func(p *crawlv1alpha1.Proxy) {
		p.Spec.Attributes["tier"] = "gold"
		p.Spec.HealthCheck.IntervalSeconds = 60
	})
	e.waitProxy("rep", "observe the attribute edit", func(p *crawlv1alpha1.Proxy) bool {
		return p.Status.ObservedGeneration == p.Generation
	})
	time.Sleep(time.Second)
	if n, d := e.calls(provider.OpCreate), e.calls(provider.OpDelete); n != 1 || d != 0 {
		t.Fatalf("after an attribute edit: create=%d delete=%d, want 1 and 0", n, d)
	}
	if got := e.get("rep").Annotations[crawlv1alpha1.SpecHashAnnotation]; got != oldHash {
		t.Fatalf("spec hash changed on an attribute edit: %q → %q", oldHash, got)
	}

	// Lost annotation: adopted as matching, no provider writes.
	e.update("rep", func(p *crawlv1alpha1.Proxy) { delete(p.Annotations, crawlv1alpha1.SpecHashAnnotation) })
	e.waitProxy("rep", "annotation re-adopted", func(p *crawlv1alpha1.Proxy) bool {
		return p.Annotations[crawlv1alpha1.SpecHashAnnotation] == oldHash
	})
	if n, d := e.calls(provider.OpCreate), e.calls(provider.OpDelete); n != 1 || d != 0 {
		t.Fatalf("adoption called the provider: create=%d delete=%d", n, d)
	}

	// Cloud-init edit: replacement.
	e.fake.ResetCalls()
	e.update("rep", func(p *crawlv1alpha1.Proxy) { p.Spec.CloudInit.UserData = "#cloud-config\nv: 2\n" })
	e.waitEvent("rep", corev1.EventTypeNormal, controller.EventReasonReplacing)
	p = e.waitProxy("rep", "replacement provisioned", func(p *crawlv1alpha1.Proxy) bool {
		return p.IsProvisioned() && p.Annotations[crawlv1alpha1.SpecHashAnnotation] != oldHash
	})
	if p.Status.ProviderID != id {
		t.Errorf("replacement providerID = %q, want the same deterministic %q", p.Status.ProviderID, id)
	}
	if want := controller.SpecHash(&p.Spec, "#cloud-config\nv: 2\n", nil); p.Annotations[crawlv1alpha1.SpecHashAnnotation] != want {
		t.Errorf("annotation = %q, want %q", p.Annotations[crawlv1alpha1.SpecHashAnnotation], want)
	}
	req, _ := e.fake.Request(id)
	if req.CloudInit != "#cloud-config\nv: 2\n" {
		t.Errorf("replacement created with cloud-init %q", req.CloudInit)
	}
	// Order: Delete, then Gets until NotFound, then Create — never Create
	// while the old instance of the same name exists.
	ops := opsOf(e.fake.Calls())
	del := slices.Index(ops, "delete")
	nf := slices.Index(ops, "get:not_found")
	cr := slices.Index(ops, "create")
	if del < 0 || nf < del || cr < nf {
		t.Errorf("call order = %v, want delete … get:not_found … create", ops)
	}
}

func opsOf(calls []fake.Call) []string {
	out := make([]string, 0, len(calls))
	for _, c := range calls {
		op := c.Op
		if c.Err != nil {
			op += ":" + provider.ClassName(c.Err)
		}
		out = append(out, op)
	}
	return out
}

// Get outcomes at steady state: a Stopped instance is deleted and recreated;
// a vanished one is recreated; a permanent Get error fails the Proxy.
func TestGetOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.create(e.managed("st"))
	p := e.waitProvisioned("st")
	id := p.Status.ProviderID

	// Stopped → InstanceStopped, Delete, then a new instance.
	e.fake.ResetCalls()
	if err := e.fake.SetState(id, provider.StateStopped); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("st", corev1.EventTypeWarning, controller.EventReasonInstanceStopped)
	e.eventually(waitTimeout, "recreated after stop", func() (bool, string) {
		inst, ok := e.fake.Instance(id)
		return ok && inst.State == provider.StateRunning && e.calls(provider.OpCreate) == 1, opsString(e.fake.Calls())
	})
	if e.calls(provider.OpDelete) < 1 {
		t.Errorf("stopped instance not deleted; calls %v", opsOf(e.fake.Calls()))
	}
	e.waitProvisioned("st")

	// Vanished out of band → recreated.
	e.fake.ResetCalls()
	if !e.fake.Remove(id) {
		t.Fatal("instance missing before Remove")
	}
	e.eventually(waitTimeout, "recreated after vanishing", func() (bool, string) {
		_, ok := e.fake.Instance(id)
		return ok && e.calls(provider.OpCreate) == 1, opsString(e.fake.Calls())
	})
	e.waitProvisioned("st")

	// Permanent Get error → Failed.
	e.fake.InjectError(provider.OpGet, provider.Permanent(errors.New("403 forbidden")))
	p = e.waitCondition("st", crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError)
	if p.Status.Phase != crawlv1alpha1.PhaseFailed {
		t.Errorf("phase = %q, want Failed", p.Status.Phase)
	}
}

func opsString(calls []fake.Call) string { return strings.Join(opsOf(calls), ",") }
