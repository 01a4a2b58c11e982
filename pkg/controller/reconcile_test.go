package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
)

// harness runs single Reconcile calls against controller-runtime's fake
// client, counting status patches and metadata updates.
type harness struct {
	t       *testing.T
	c       client.Client
	r       *ProxyReconciler
	prov    *fake.Provider
	rec     *events.FakeRecorder
	patches int
	updates int
	// stale, when set, is what the next Get of a Proxy returns: a cache
	// that has not yet seen the latest write.
	stale    *crawlv1alpha1.Proxy
	key      types.NamespacedName
	interval Intervals
}

func newHarness(t *testing.T, objs ...client.Object) *harness {
	t.Helper()
	s := runtime.NewScheme()
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, prov: fake.New(fake.WithGetsUntilRunning(0)), rec: events.NewFakeRecorder(100)}
	h.c = clientfake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&crawlv1alpha1.Proxy{}).
		WithObjects(objs...).
		WithIndex(&crawlv1alpha1.Proxy{}, SecretRefIndex, secretRefIndexValue).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
				if p, ok := o.(*crawlv1alpha1.Proxy); ok && h.stale != nil {
					h.stale.DeepCopyInto(p)
					h.stale = nil
					return nil
				}
				return c.Get(ctx, key, o, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
				h.updates++
				return c.Update(ctx, o, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				h.patches++
				return c.SubResource(sub).Patch(ctx, o, p, opts...)
			},
		}).Build()
	h.interval = Intervals{ProvisioningPoll: 2 * time.Second, DeletionPoll: 3 * time.Second, DriftPoll: time.Minute, QuotaRetry: 5 * time.Minute, RequeueNow: time.Second}
	h.r = &ProxyReconciler{
		Client:    h.c,
		Providers: fake.Providers{"fake": h.prov},
		Recorder:  h.rec,
		Intervals: h.interval,
		Clock:     clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
	return h
}

func managedProxy(name string) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: "fake"},
	}
}

func (h *harness) reconcile() (ctrl.Result, error) {
	h.t.Helper()
	return h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: h.key})
}

func (h *harness) proxy() *crawlv1alpha1.Proxy {
	h.t.Helper()
	var p crawlv1alpha1.Proxy
	if err := h.c.Get(context.Background(), h.key, &p); err != nil {
		h.t.Fatal(err)
	}
	return &p
}

func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func provisioned(p *crawlv1alpha1.Proxy) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
}

// Step by step through create → running → steady state, checking each
// pass's result, writes and events.
func TestReconcileCreateToSteadyState(t *testing.T) {
	h := newHarness(t, managedProxy("a"))
	h.key = types.NamespacedName{Namespace: "ns", Name: "a"}

	// 1: finalizer only, status written before the metadata update.
	res, err := h.reconcile()
	if err != nil || res != (ctrl.Result{}) {
		t.Fatalf("pass 1 = %+v, %v; want done", res, err)
	}
	p := h.proxy()
	if !strings.Contains(strings.Join(p.Finalizers, ","), crawlv1alpha1.FinalizerName) || p.Status.Phase != crawlv1alpha1.PhasePending {
		t.Fatalf("pass 1: finalizers %v phase %q", p.Finalizers, p.Status.Phase)
	}
	if h.patches != 1 || h.updates != 1 || len(h.prov.Calls()) != 0 {
		t.Fatalf("pass 1: patches=%d updates=%d provider calls=%d", h.patches, h.updates, len(h.prov.Calls()))
	}

	// 2: create.
	res, err = h.reconcile()
	if err != nil || res.RequeueAfter != h.interval.ProvisioningPoll {
		t.Fatalf("pass 2 = %+v, %v; want ProvisioningPoll", res, err)
	}
	p = h.proxy()
	wantID := fake.ProviderID(provider.NameFromUID("uid-a"))
	if p.Status.ProviderID != wantID || p.Annotations[crawlv1alpha1.SpecHashAnnotation] != SpecHash(&p.Spec, "", nil) {
		t.Fatalf("pass 2: providerID %q annotation %q", p.Status.ProviderID, p.Annotations[crawlv1alpha1.SpecHashAnnotation])
	}
	if c := provisioned(p); c.Reason != crawlv1alpha1.ReasonProvisioning || p.Status.Phase != crawlv1alpha1.PhaseProvisioning {
		t.Fatalf("pass 2: %+v phase %q", c, p.Status.Phase)
	}

	// 3: running.
	res, err = h.reconcile()
	if err != nil || res.RequeueAfter != h.interval.DriftPoll {
		t.Fatalf("pass 3 = %+v, %v; want DriftPoll", res, err)
	}
	p = h.proxy()
	if c := provisioned(p); c.Status != metav1.ConditionTrue || c.Reason != crawlv1alpha1.ReasonCreated || p.Status.IP == "" {
		t.Fatalf("pass 3: %s", describeUnit(p))
	}

	// 4, 5: steady state — no write at all.
	patches, updates := h.patches, h.updates
	for range 2 {
		if res, err = h.reconcile(); err != nil || res.RequeueAfter != h.interval.DriftPoll {
			t.Fatalf("steady pass = %+v, %v", res, err)
		}
	}
	if h.patches != patches || h.updates != updates {
		t.Errorf("steady state wrote: patches %d→%d updates %d→%d", patches, h.patches, updates, h.updates)
	}
	if diff := cmp.Diff([]string{
		"Normal Provisioning Creating instance " + wantID,
		"Normal Created Instance " + wantID + " is running at " + p.Status.IP,
	}, h.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func withFinalizer(p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy {
	p.Finalizers = []string{crawlv1alpha1.FinalizerName}
	return p
}

func TestReconcileProviderErrorClasses(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantResult ctrl.Result
		wantErr    bool
		wantReason string
		wantPhase  crawlv1alpha1.ProxyPhase
		wantEvent  string
	}{
		{"quota waits", provider.QuotaExceeded(errors.New("no cpus")), ctrl.Result{RequeueAfter: 5 * time.Minute}, false,
			crawlv1alpha1.ReasonQuotaExceeded, crawlv1alpha1.PhasePending, "Warning QuotaExceeded"},
		{"permanent fails", provider.Permanent(errors.New("bad image")), ctrl.Result{}, false,
			crawlv1alpha1.ReasonPermanentError, crawlv1alpha1.PhaseFailed, "Warning PermanentError"},
		{"transient backs off", provider.Transient(errors.New("503")), ctrl.Result{}, true,
			crawlv1alpha1.ReasonProviderError, crawlv1alpha1.PhasePending, "Warning ProviderError"},
		{"unclassified is transient", errors.New("connection reset"), ctrl.Result{}, true,
			crawlv1alpha1.ReasonProviderError, crawlv1alpha1.PhasePending, "Warning ProviderError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, withFinalizer(managedProxy("a")))
			h.key = types.NamespacedName{Namespace: "ns", Name: "a"}
			h.prov.InjectError(provider.OpCreate, tt.err)
			res, err := h.reconcile()
			if (err != nil) != tt.wantErr || res != tt.wantResult {
				t.Fatalf("Reconcile = %+v, %v; want %+v, error %v", res, err, tt.wantResult, tt.wantErr)
			}
			p := h.proxy()
			if c := provisioned(p); c == nil || c.Reason != tt.wantReason || p.Status.Phase != tt.wantPhase {
				t.Fatalf("status: %s", describeUnit(p))
			}
			evs := h.events()
			if len(evs) != 1 || !strings.HasPrefix(evs[0], tt.wantEvent) {
				t.Errorf("events = %q, want one %q", evs, tt.wantEvent)
			}
		})
	}
}

// The latch: after a permanent error the next pass calls nothing and writes
// nothing; a generation bump reopens it.
func TestReconcileLatch(t *testing.T) {
	h := newHarness(t, withFinalizer(managedProxy("a")))
	h.key = types.NamespacedName{Namespace: "ns", Name: "a"}
	h.prov.InjectError(provider.OpCreate, provider.Permanent(errors.New("bad")))
	if _, err := h.reconcile(); err != nil {
		t.Fatal(err)
	}
	calls, patches := len(h.prov.Calls()), h.patches
	for range 3 {
		if res, err := h.reconcile(); err != nil || res != (ctrl.Result{}) {
			t.Fatalf("latched pass = %+v, %v", res, err)
		}
	}
	if len(h.prov.Calls()) != calls || h.patches != patches {
		t.Fatalf("latched passes called the provider (%d→%d) or wrote (%d→%d)", calls, len(h.prov.Calls()), patches, h.patches)
	}
	p := h.proxy()
	p.Generation = 2 // the fake client does not bump it
	p.Spec.Attributes = map[string]string{"x": "y"}
	if err := h.c.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if res, err := h.reconcile(); err != nil || res.RequeueAfter != h.interval.ProvisioningPoll {
		t.Fatalf("after spec edit = %+v, %v; want a create", res, err)
	}
	if n := len(h.prov.CallsOf(provider.OpCreate)); n != 2 {
		t.Errorf("creates = %d, want 2", n)
	}
}

// The cache normally hides unlabelled Secrets; the reconciler checks the
// label itself too, so any reader gives the same answer.
func TestResolveCloudInit(t *testing.T) {
	labelled := map[string]string{crawlv1alpha1.CloudInitSecretLabel: "true"}
	secret := func(name string, labels map[string]string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	ref := func(name, key string) *crawlv1alpha1.CloudInit {
		return &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: name, Key: key}}
	}
	tests := []struct {
		name    string
		ci      *crawlv1alpha1.CloudInit
		want    string
		wantErr string
	}{
		{"none", nil, "", ""},
		{"inline", &crawlv1alpha1.CloudInit{UserData: "inline"}, "inline", ""},
		{"labelled, default key", ref("good", ""), "v1", ""},
		{"labelled, custom key", ref("good", "alt"), "v2", ""},
		{"labelled, missing key", ref("good", "nope"), "", `key "nope" not present`},
		{"unlabelled", ref("plain", ""), "", "not labelled"},
		{"label not true", ref("falsy", ""), "", "not labelled"},
		{"missing", ref("absent", ""), "", "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t,
				secret("good", labelled, map[string]string{"userData": "v1", "alt": "v2"}),
				secret("plain", nil, map[string]string{"userData": "x"}),
				secret("falsy", map[string]string{crawlv1alpha1.CloudInitSecretLabel: "false"}, map[string]string{"userData": "x"}),
			)
			p := managedProxy("a")
			p.Spec.CloudInit = tt.ci
			got, err := h.r.resolveCloudInit(context.Background(), p)
			if tt.wantErr != "" {
				if !IsCloudInitError(err) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a CloudInitError containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("resolveCloudInit = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestProxiesForSecret(t *testing.T) {
	refTo := func(name, secret string) *crawlv1alpha1.Proxy {
		p := managedProxy(name)
		p.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: secret}}
		return p
	}
	other := refTo("elsewhere", "s")
	other.Namespace = "other"
	h := newHarness(t, refTo("a", "s"), refTo("b", "s"), refTo("c", "t"), managedProxy("d"), other)
	got := h.r.proxiesForSecret(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}})
	var names []string
	for _, r := range got {
		names = append(names, r.String())
	}
	if diff := cmp.Diff([]string{"ns/a", "ns/b"}, names); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestPredicateIgnoresStatusOnlyUpdates(t *testing.T) {
	pred := reconcileRelevantChange()
	old := managedProxy("a")
	statusOnly := old.DeepCopy()
	statusOnly.Status.Phase = crawlv1alpha1.PhaseReady
	statusOnly.ResourceVersion = "2"
	annotated := old.DeepCopy()
	annotated.Annotations = map[string]string{"x": "y"}
	spec := old.DeepCopy()
	spec.Generation = 2
	fin := old.DeepCopy()
	fin.Finalizers = []string{"f"}
	now := metav1.Now()
	deleting := old.DeepCopy()
	deleting.DeletionTimestamp = &now
	for name, tc := range map[string]struct {
		n    *crawlv1alpha1.Proxy
		want bool
	}{
		"status only": {statusOnly, false},
		"annotation":  {annotated, true},
		"generation":  {spec, true},
		"finalizers":  {fin, true},
		"deletion":    {deleting, true},
	} {
		if got := pred.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tc.n}); got != tc.want {
			t.Errorf("%s: predicate = %v, want %v", name, got, tc.want)
		}
	}
}

func describeUnit(p *crawlv1alpha1.Proxy) string {
	s := string(p.Status.Phase) + " ip=" + p.Status.IP
	for _, c := range p.Status.Conditions {
		s += " " + c.Type + "=" + string(c.Status) + "/" + c.Reason + "(" + c.Message + ")"
	}
	return s
}

// An instance found under the Proxy's name but built from another spec (the
// operator died after inserting it and before recording it, and the spec
// was edited meanwhile) is replaced; one of the current spec is kept.
func TestReconcileReplacesAnInstanceOfAnotherSpec(t *testing.T) {
	for _, tt := range []struct {
		name        string
		leftover    func(current string) string // the SpecHash of the instance a crash left
		wantReplace bool
	}{
		{"built from an older spec", func(string) string { return "0123456789abcdef0123456789abcdef" }, true},
		{"built from the current spec", func(current string) string { return current }, false},
		{"from an operator that stored no hash", func(string) string { return "" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := withFinalizer(managedProxy("a"))
			h := newHarness(t, p)
			h.key = types.NamespacedName{Namespace: "ns", Name: "a"}
			current := instanceSpecHash(SpecHash(&p.Spec, "", nil))
			left, err := h.prov.Create(t.Context(), provider.CreateRequest{
				Name: provider.NameFromUID(p.UID), Tag: provider.DefaultTag, OwnerUID: p.UID, SpecHash: tt.leftover(current),
			})
			if err != nil {
				t.Fatal(err)
			}
			h.prov.ResetCalls()
			for range 8 {
				if _, err := h.reconcile(); err != nil {
					t.Fatalf("reconcile: %v", err)
				}
			}
			got := h.proxy()
			if c := provisioned(got); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("not provisioned after 8 passes: %s", describeUnit(got))
			}
			inst, ok := h.prov.Instance(got.Status.ProviderID)
			if !ok {
				t.Fatalf("the recorded instance %s does not exist", got.Status.ProviderID)
			}
			deleted := len(h.prov.CallsOf(provider.OpDelete)) > 0
			if deleted != tt.wantReplace {
				t.Errorf("leftover %s deleted = %v, want %v (calls %v)", left, deleted, tt.wantReplace, h.prov.Calls())
			}
			if tt.wantReplace && inst.SpecHash != current {
				t.Errorf("the replacement's spec hash = %q, want the current spec's %q", inst.SpecHash, current)
			}
		})
	}
}
