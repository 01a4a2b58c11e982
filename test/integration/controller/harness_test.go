package controller_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/health"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

// fakeProviderName is the spec.provider the fake provider is registered under.
const fakeProviderName = "fake"

// framework.OperatorUser is the identity the manager runs as: bound to the generated
// ClusterRole only, so a missing RBAC marker fails these tests.

// suite is the control plane shared by every test of the package; each test
// gets its own namespace and its own manager restricted to it, so tests run
// in parallel without seeing each other's objects.
type suite struct {
	*framework.OperatorSuite
}

// shared is the test-process fixture, set once by TestMain before any test.
var shared suite

func TestMain(m *testing.M) {
	// controller-runtime complains loudly when its global logger is unset;
	// per-test loggers are passed explicitly below.
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	os.Exit(framework.Main(m, "controller", setupSuite))
}

func setupSuite(ctx context.Context, e *framework.Env) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return err
	}
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		return err
	}
	ops, err := e.OperatorSuite(ctx, s)
	if err != nil {
		return err
	}
	shared = suite{OperatorSuite: ops}
	return nil
}

// env is one test's world: a namespace, a manager running the reconciler as
// the operator user, the fake provider and a fake health source.
type env struct {
	t         testing.TB
	ns        string
	c         client.WithWatch // admin, uncached
	fake      *fake.Provider
	health    *fakeHealth
	healthCh  chan event.TypedGenericEvent[*crawlv1alpha1.Proxy]
	intervals controller.Intervals
	logs      *framework.SyncBuffer
}

type envOptions struct {
	fakeOptions []fake.Option
	intervals   controller.Intervals // zero fields: testIntervals
}

// testIntervals are short so every branch runs in seconds, but QuotaRetry is
// far above the workqueue's first backoff steps so the two are told apart.
func testIntervals() controller.Intervals {
	return controller.Intervals{
		ProvisioningPoll: 200 * time.Millisecond,
		DeletionPoll:     200 * time.Millisecond,
		DriftPoll:        time.Second,
		QuotaRetry:       4 * time.Second,
		RequeueNow:       100 * time.Millisecond,
	}
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	ctx := context.Background()
	c, ns := shared.Namespace(t, "ctrl-")

	iv := testIntervals()
	for _, f := range []struct{ dst, src *time.Duration }{
		{&iv.ProvisioningPoll, &o.intervals.ProvisioningPoll},
		{&iv.DeletionPoll, &o.intervals.DeletionPoll},
		{&iv.DriftPoll, &o.intervals.DriftPoll},
		{&iv.QuotaRetry, &o.intervals.QuotaRetry},
		{&iv.RequeueNow, &o.intervals.RequeueNow},
	} {
		if *f.src > 0 {
			*f.dst = *f.src
		}
	}

	e := &env{
		t:         t,
		ns:        ns,
		c:         c,
		fake:      fake.New(o.fakeOptions...),
		health:    &fakeHealth{snaps: map[types.NamespacedName]health.Snapshot{}},
		healthCh:  make(chan event.TypedGenericEvent[*crawlv1alpha1.Proxy], 16),
		intervals: iv,
		logs:      &framework.SyncBuffer{},
	}

	mgr, err := ctrl.NewManager(shared.Operator, ctrl.Options{
		Scheme:                 shared.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject:          controller.CacheByObject(),
		},
		// Every test runs a controller named "proxy" in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Logger:     zap.New(zap.WriteTo(e.logs), zap.UseDevMode(true)),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &controller.ProxyReconciler{
		Client:       mgr.GetClient(),
		Providers:    fake.Providers{fakeProviderName: e.fake},
		Recorder:     mgr.GetEventRecorder("proxy-operator"),
		Health:       e.health,
		HealthEvents: e.healthCh,
		Intervals:    iv,
	}
	mctx, cancel := context.WithCancel(ctx)
	if err := r.SetupWithManager(mctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("manager did not stop")
		}
		if t.Failed() {
			t.Logf("--- operator log ---\n%s", e.logs.String())
		}
	})
	return e
}

// fakeHealth is a HealthSource whose verdicts the test sets.
type fakeHealth struct {
	mu    sync.Mutex
	snaps map[types.NamespacedName]health.Snapshot
	calls int
}

var _ controller.HealthSource = (*fakeHealth)(nil)

func (f *fakeHealth) Snapshot(key types.NamespacedName) (health.Snapshot, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	s, ok := f.snaps[key]
	return s, ok
}

func (f *fakeHealth) set(key types.NamespacedName, s health.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snaps[key] = s
}

// notify sends a health transition for the Proxy, as the engine would.
func (e *env) notify(name string) {
	e.healthCh <- event.TypedGenericEvent[*crawlv1alpha1.Proxy]{Object: &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
	}}
}

func (e *env) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: e.ns, Name: name}
}

// managed returns a Managed Proxy on the fake provider.
func (e *env) managed(name string) *crawlv1alpha1.Proxy {
	return builders.Proxy(e.ns, name).Managed(fakeProviderName).Attr("region", "local").Obj()
}

// external returns an External Proxy at host:port.
func (e *env) external(name, host string, port int32) *crawlv1alpha1.Proxy {
	return builders.Proxy(e.ns, name).External(host, port).Obj()
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), obj); err != nil {
		e.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (e *env) get(name string) *crawlv1alpha1.Proxy {
	e.t.Helper()
	var p crawlv1alpha1.Proxy
	if err := e.c.Get(context.Background(), e.key(name), &p); err != nil {
		e.t.Fatalf("getting proxy %s: %v", name, err)
	}
	return &p
}

// update applies mutate to the latest Proxy, retrying on conflicts (the
// operator writes the same object).
func (e *env) update(name string, mutate func(*crawlv1alpha1.Proxy)) {
	e.t.Helper()
	for i := 0; ; i++ {
		p := e.get(name)
		mutate(p)
		err := e.c.Update(context.Background(), p)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || i > 20 {
			e.t.Fatalf("updating proxy %s: %v", name, err)
		}
	}
}

// eventually polls cond until it reports true or timeout passes.
func (e *env) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const waitTimeout = 30 * time.Second

// waitProxy waits until the Proxy satisfies pred and returns it.
func (e *env) waitProxy(name, what string, pred func(*crawlv1alpha1.Proxy) bool) *crawlv1alpha1.Proxy {
	e.t.Helper()
	var got *crawlv1alpha1.Proxy
	e.eventually(waitTimeout, fmt.Sprintf("proxy %s: %s", name, what), func() (bool, string) {
		var p crawlv1alpha1.Proxy
		if err := e.c.Get(context.Background(), e.key(name), &p); err != nil {
			return false, err.Error()
		}
		got = &p
		return pred(&p), describe(&p)
	})
	return got
}

// waitCondition waits for condition condType with status and reason.
func (e *env) waitCondition(name, condType string, status metav1.ConditionStatus, reason string) *crawlv1alpha1.Proxy {
	e.t.Helper()
	return e.waitProxy(name, fmt.Sprintf("%s=%s/%s", condType, status, reason), func(p *crawlv1alpha1.Proxy) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, condType)
		return c != nil && c.Status == status && c.Reason == reason && p.Status.ObservedGeneration == p.Generation
	})
}

// waitProvisioned waits until the instance runs and status says so.
func (e *env) waitProvisioned(name string) *crawlv1alpha1.Proxy {
	e.t.Helper()
	return e.waitCondition(name, crawlv1alpha1.ConditionProvisioned, metav1.ConditionTrue, crawlv1alpha1.ReasonCreated)
}

func (e *env) waitGone(name string) {
	e.t.Helper()
	e.eventually(waitTimeout, "proxy "+name+" deleted", func() (bool, string) {
		var p crawlv1alpha1.Proxy
		err := e.c.Get(context.Background(), e.key(name), &p)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, describe(&p)
	})
}

func describe(p *crawlv1alpha1.Proxy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gen=%d observed=%d phase=%q providerID=%q ip=%q finalizers=%v", p.Generation, p.Status.ObservedGeneration,
		p.Status.Phase, p.Status.ProviderID, p.Status.IP, p.Finalizers)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s/%s(%q,gen %d)", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
	return b.String()
}

// events returns the Events about the named Proxy as "Type/Reason" strings,
// oldest first.
func (e *env) events(name string) []string {
	e.t.Helper()
	var list corev1.EventList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("involvedObject.name", name)}); err != nil {
		e.t.Fatalf("listing events: %v", err)
	}
	out := make([]string, 0, len(list.Items))
	for _, ev := range list.Items {
		out = append(out, ev.Type+"/"+ev.Reason)
	}
	return out
}

// waitEvent waits for an Event of eventType and reason about the Proxy.
func (e *env) waitEvent(name, eventType, reason string) {
	e.t.Helper()
	want := eventType + "/" + reason
	e.eventually(waitTimeout, "event "+want+" about "+name, func() (bool, string) {
		got := e.events(name)
		for _, g := range got {
			if g == want {
				return true, ""
			}
		}
		return false, fmt.Sprint(got)
	})
}

// calls counts the fake's calls of op.
func (e *env) calls(op string) int { return len(e.fake.CallsOf(op)) }

// history records every version of one Proxy the API server sends on a
// watch: the phases it went through and how many times it was modified.
type history struct {
	mu       sync.Mutex
	states   []string // "phase Provisioned-reason"
	phases   []crawlv1alpha1.ProxyPhase
	modified int
	stop     func()
}

// watch starts recording the Proxy name (which may not exist yet).
func (e *env) watch(name string) *history {
	e.t.Helper()
	var list crawlv1alpha1.ProxyList
	w, err := e.c.Watch(context.Background(), &list, client.InNamespace(e.ns),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	if err != nil {
		e.t.Fatalf("watching proxy %s: %v", name, err)
	}
	h := &history{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*crawlv1alpha1.Proxy)
			if !ok {
				continue
			}
			reason := ""
			if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned); c != nil {
				reason = c.Reason
			}
			h.mu.Lock()
			if ev.Type == watch.Modified {
				h.modified++
			}
			h.phases = append(h.phases, p.Status.Phase)
			h.states = append(h.states, string(p.Status.Phase)+" "+reason)
			h.mu.Unlock()
		}
	}()
	e.t.Cleanup(w.Stop)
	return h
}

func (h *history) modifications() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.modified
}

func (h *history) sawPhase(ph crawlv1alpha1.ProxyPhase) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.phases {
		if p == ph {
			return true
		}
	}
	return false
}

func (h *history) sawState(s string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.states {
		if x == s {
			return true
		}
	}
	return false
}

func (h *history) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.states, " → ")
}
