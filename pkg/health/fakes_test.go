package health

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// fakeReader serves a settable list of Proxies.
type fakeReader struct {
	mu      sync.Mutex
	proxies []crawlv1alpha1.Proxy
	nextErr error
	calls   int
}

var _ Reader = (*fakeReader)(nil)

func (r *fakeReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if err := r.nextErr; err != nil {
		r.nextErr = nil
		return err
	}
	pl, ok := list.(*crawlv1alpha1.ProxyList)
	if !ok {
		return errors.New("fakeReader lists Proxies only")
	}
	pl.Items = append(pl.Items[:0], r.proxies...)
	return nil
}

func (r *fakeReader) set(ps ...*crawlv1alpha1.Proxy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.proxies = r.proxies[:0]
	for _, p := range ps {
		r.proxies = append(r.proxies, *p.DeepCopy())
	}
}

func (r *fakeReader) failNext(err error) {
	r.mu.Lock()
	r.nextErr = err
	r.mu.Unlock()
}

// result is one scripted probe outcome.
type result struct {
	latency time.Duration
	err     error
}

var errProbe = errors.New("scripted probe failure")

func ok(ms int) result { return result{latency: time.Duration(ms) * time.Millisecond} }
func fail() result     { return result{err: errProbe} }

// fakeProber answers scripted results per proxy (default: success in 10 ms)
// and records every target it was asked to probe.
type fakeProber struct {
	mu      sync.Mutex
	script  map[types.NamespacedName][]result
	nextErr error
	calls   []Target
}

var _ Prober = (*fakeProber)(nil)

func newFakeProber() *fakeProber {
	return &fakeProber{script: map[types.NamespacedName][]result{}}
}

func (f *fakeProber) Probe(_ context.Context, t Target) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, t)
	if err := f.nextErr; err != nil {
		f.nextErr = nil
		return 0, err
	}
	if q := f.script[t.Key]; len(q) > 0 {
		f.script[t.Key] = q[1:]
		return q[0].latency, q[0].err
	}
	return 10 * time.Millisecond, nil
}

func (f *fakeProber) push(key types.NamespacedName, rs ...result) {
	f.mu.Lock()
	f.script[key] = append(f.script[key], rs...)
	f.mu.Unlock()
}

func (f *fakeProber) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// fakeMetrics records ObserveProbe and Forget calls.
type fakeMetrics struct {
	mu        sync.Mutex
	observed  []observation
	forgotten []string
}

type observation struct {
	proxy string
	d     time.Duration
	ok    bool
}

var _ ProbeMetrics = (*fakeMetrics)(nil)

func (m *fakeMetrics) ObserveProbe(proxy string, d time.Duration, ok bool) {
	m.mu.Lock()
	m.observed = append(m.observed, observation{proxy, d, ok})
	m.mu.Unlock()
}

func (m *fakeMetrics) Forget(proxy string) {
	m.mu.Lock()
	m.forgotten = append(m.forgotten, proxy)
	m.mu.Unlock()
}

// harness drives an engine tick by tick on a fake clock, running probes
// synchronously so every test is deterministic.
type harness struct {
	t       *testing.T
	ctx     context.Context
	clk     *clocktesting.FakeClock
	e       *Engine
	reader  *fakeReader
	prober  *fakeProber
	metrics *fakeMetrics
	jobs    chan job
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func newHarness(t *testing.T, o Options) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		ctx:     context.Background(),
		clk:     clocktesting.NewFakeClock(t0),
		reader:  &fakeReader{},
		prober:  newFakeProber(),
		metrics: &fakeMetrics{},
	}
	o.Clock, o.Reader, o.Prober, o.Metrics = h.clk, h.reader, h.prober, h.metrics
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic unless a test sets its own.
	e.jitter = func(time.Duration) time.Duration { return 0 }
	h.e = e
	h.jobs = make(chan job, e.opts.QueueSize)
	return h
}

// tick runs one tick at the fake clock's time and returns the dispatched
// jobs (taken off the queue, as workers would).
func (h *harness) tick() []job {
	h.e.tick(h.ctx, h.clk.Now(), h.jobs)
	var js []job
	for {
		select {
		case j := <-h.jobs:
			js = append(js, j)
		default:
			return js
		}
	}
}

// run probes and records the jobs at the clock's current time.
func (h *harness) run(js []job) {
	for _, j := range js {
		h.e.run(h.ctx, j)
	}
}

// round ticks, runs what was dispatched and returns the probed keys.
func (h *harness) round() []types.NamespacedName {
	js := h.tick()
	h.run(js)
	keys := make([]types.NamespacedName, 0, len(js))
	for _, j := range js {
		keys = append(keys, j.target.Key)
	}
	return keys
}

// advance steps the clock by d and runs one round.
func (h *harness) advance(d time.Duration) []types.NamespacedName {
	h.clk.Step(d)
	return h.round()
}

// events drains the event channel.
func (h *harness) events() []types.NamespacedName {
	var keys []types.NamespacedName
	for {
		select {
		case ev := <-h.e.Events():
			keys = append(keys, types.NamespacedName{Namespace: ev.Object.Namespace, Name: ev.Object.Name})
		default:
			return keys
		}
	}
}

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

type proxyOpt func(*crawlv1alpha1.Proxy)

// newProxy returns an External proxy at 10.0.0.1:3128 probed every 10 s
// (thresholds: 1 success, 3 failures unless changed).
func newProxy(name string, opts ...proxyOpt) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: "10.0.0.1", Port: 3128},
			HealthCheck: crawlv1alpha1.HealthCheck{
				URL:             "http://origin.test/",
				IntervalSeconds: 10, TimeoutSeconds: 5, SuccessThreshold: 1, FailureThreshold: 3,
				ExpectedStatus: 200,
			},
		},
		Status: crawlv1alpha1.ProxyStatus{IP: "10.0.0.1"},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func thresholds(success, failure int32) proxyOpt {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.HealthCheck.SuccessThreshold, p.Spec.HealthCheck.FailureThreshold = success, failure
	}
}

// healthyCond seeds status as a previous leader left it.
func healthyCond(status metav1.ConditionStatus, latencyMs int64, at time.Time) proxyOpt {
	return func(p *crawlv1alpha1.Proxy) {
		reason := crawlv1alpha1.ReasonProbeSucceeded
		if status != metav1.ConditionTrue {
			reason = crawlv1alpha1.ReasonProbeFailed
		}
		p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{
			Type: crawlv1alpha1.ConditionHealthy, Status: status, Reason: reason,
			LastTransitionTime: metav1.NewTime(at),
		})
		if status == metav1.ConditionTrue {
			p.Status.LatencyMillis = ptr.To(latencyMs)
		}
		p.Status.LastHealthCheckTime = ptr.To(metav1.NewTime(at))
	}
}

func managed(ip, providerID string) proxyOpt {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Mode, p.Spec.Endpoint, p.Spec.Provider = crawlv1alpha1.ModeManaged, nil, "fake"
		p.Status.IP, p.Status.ProviderID = ip, providerID
	}
}
