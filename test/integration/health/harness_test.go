package health_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/health"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

// framework.OperatorUser is the identity the manager runs as: bound to the generated
// ClusterRole only, so a missing RBAC marker of the engine fails these tests.

// Probe settings of every test Proxy: a dead proxy must turn Unhealthy within
// failureThreshold × interval + 2s = 6s.
const (
	probeInterval    = 2 // seconds
	probeTimeout     = 1 // seconds
	failureThreshold = 2
	unhealthyBound   = failureThreshold*probeInterval*time.Second + 2*time.Second
)

type suite struct {
	*framework.OperatorSuite
	squidPath string
}

var shared suite

func TestMain(m *testing.M) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	os.Exit(framework.Main(m, "health", setupSuite))
}

func setupSuite(ctx context.Context, e *framework.Env) error {
	squidPath, err := nodeagent.LookSquid("")
	if err != nil {
		return fmt.Errorf("%w (hack/install-squid.sh installs it)", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	s, err := app.NewScheme()
	if err != nil {
		return err
	}
	ops, err := e.OperatorSuite(ctx, s)
	if err != nil {
		return err
	}
	shared = suite{OperatorSuite: ops, squidPath: squidPath}
	return nil
}

// env is one test's world: a namespace the operator may act in, an admin
// client, and the operator (manager + reconciler + engine), restartable.
type env struct {
	t    *testing.T
	ns   string
	c    client.WithWatch
	logs *framework.SyncBuffer

	mu       sync.Mutex
	stopOp   func()
	engine   *health.Engine
	restarts int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c, ns := shared.Namespace(t, "health-")
	e := &env{t: t, ns: ns, c: c, logs: &framework.SyncBuffer{}}
	t.Cleanup(func() {
		e.stopOperator()
		if t.Failed() {
			t.Logf("--- operator log ---\n%s", e.logs.String())
		}
	})
	return e
}

// startOperator runs a fresh manager with the reconciler and a fresh health
// engine, wired as app.Run wires them (HealthSource adapter, event channel,
// engine as a Runnable), restricted to the test's namespace.
func (e *env) startOperator() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopOp != nil {
		e.t.Fatal("operator already running")
	}
	e.restarts++
	logger := zap.New(zap.WriteTo(e.logs), zap.UseDevMode(true)).WithValues("run", e.restarts)
	mgr, err := ctrl.NewManager(shared.Operator, ctrl.Options{
		Scheme:                 shared.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{e.ns: {}},
			ByObject:          controller.CacheByObject(),
		},
		// Every run registers a controller named "proxy" in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Logger:     logger,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	eng, err := health.New(health.Options{
		// A short tick keeps the detection bound tight on a loaded machine;
		// the threshold logic is the production one.
		Tick:   250 * time.Millisecond,
		Clock:  clock.RealClock{},
		Reader: mgr.GetCache(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := mgr.Add(eng); err != nil {
		e.t.Fatal(err)
	}
	r := &controller.ProxyReconciler{
		Client:       mgr.GetClient(),
		Providers:    fake.Providers{},
		Recorder:     mgr.GetEventRecorder(app.EventReporter),
		Health:       eng,
		HealthEvents: eng.Events(),
		Clock:        clock.RealClock{},
	}
	ctx, cancel := context.WithCancel(ctrllog.IntoContext(context.Background(), logger))
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	e.engine = eng
	e.stopOp = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Errorf("manager did not stop")
		}
	}
}

// stopOperator stops the running manager and waits for it.
func (e *env) stopOperator() {
	e.mu.Lock()
	stop := e.stopOp
	e.stopOp = nil
	e.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (e *env) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: e.ns, Name: name}
}

// external returns an External Proxy at sq probing url.
func (e *env) external(name string, sq *squid, url string, tls *crawlv1alpha1.HealthCheckTLS) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: sq.addr.String(), Port: nodeagent.DefaultSquidPort},
			HealthCheck: crawlv1alpha1.HealthCheck{
				URL:              url,
				IntervalSeconds:  probeInterval,
				TimeoutSeconds:   probeTimeout,
				SuccessThreshold: 1,
				FailureThreshold: failureThreshold,
				ExpectedStatus:   http.StatusOK,
				TLS:              tls,
			},
		},
	}
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

const waitTimeout = 30 * time.Second

// waitProxy polls the Proxy until pred holds and returns it, with the time
// the wait took.
func (e *env) waitProxy(name, what string, timeout time.Duration, pred func(*crawlv1alpha1.Proxy) bool) (*crawlv1alpha1.Proxy, time.Duration) {
	e.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	var last string
	for {
		var p crawlv1alpha1.Proxy
		err := e.c.Get(context.Background(), e.key(name), &p)
		if err == nil && pred(&p) {
			return &p, time.Since(start)
		}
		if err != nil {
			last = err.Error()
		} else {
			last = describe(&p)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for proxy %s: %s; last state: %s", timeout, name, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isReady(p *crawlv1alpha1.Proxy) bool {
	ready := p.Condition(crawlv1alpha1.ConditionReady)
	return p.Status.Phase == crawlv1alpha1.PhaseReady && p.IsHealthy() && ready != nil && ready.Status == metav1.ConditionTrue
}

func isUnhealthy(p *crawlv1alpha1.Proxy) bool {
	c := p.Condition(crawlv1alpha1.ConditionHealthy)
	ready := p.Condition(crawlv1alpha1.ConditionReady)
	return p.Status.Phase == crawlv1alpha1.PhaseUnhealthy && c != nil && c.Status == metav1.ConditionFalse &&
		ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == string(crawlv1alpha1.PhaseUnhealthy)
}

func describe(p *crawlv1alpha1.Proxy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ip=%s", p.Status.Phase, p.Status.IP)
	if p.Status.LatencyMillis != nil {
		fmt.Fprintf(&b, " latency=%dms", *p.Status.LatencyMillis)
	}
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s/%s(%q)", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// events returns the Events about the named Proxy as "Type/Reason".
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

func (e *env) waitEvent(name, eventType, reason string) {
	e.t.Helper()
	want := eventType + "/" + reason
	deadline := time.Now().Add(waitTimeout)
	for {
		got := e.events(name)
		for _, g := range got {
			if g == want {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no event %s about %s; got %v", want, name, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// squid is one real squid forward proxy on its own loopback address.
type squid struct {
	t    *testing.T
	addr netip.Addr
	cfg  nodeagent.SquidConfig

	mu  sync.Mutex
	run *nodeagent.Squid
}

// squidAddrs hands out loopback addresses; the third octet derives from the
// pid so parallel test binaries on the machine pick different ones.
var squidAddrs atomic.Uint32

// startSquid starts squid on a free 127.77.x.y:3128 with a 0777 temp dir
// (squid runs as its own user) and stops it when the test ends.
func startSquid(t *testing.T) *squid {
	t.Helper()
	var addr netip.Addr
	for range 250 {
		n := squidAddrs.Add(1)
		a := netip.AddrFrom4([4]byte{127, 77, byte(os.Getpid() % 250), byte(1 + n%250)})
		if nodeagent.PortFree(net.JoinHostPort(a.String(), fmt.Sprint(nodeagent.DefaultSquidPort))) {
			addr = a
			break
		}
	}
	if !addr.IsValid() {
		t.Fatal("no free loopback address for squid")
	}
	dir, err := os.MkdirTemp("", "health-squid-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	s := &squid{t: t, addr: addr, cfg: nodeagent.SquidConfig{Addr: addr, Dir: dir, VisibleHostname: "health-test"}}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			if b, err := os.ReadFile(s.cfg.CacheLogPath()); err == nil {
				t.Logf("--- squid %s cache.log ---\n%s", addr, logtail.Lines(string(b), 30))
			}
		}
		_ = os.RemoveAll(dir)
	})
	s.start()
	return s
}

func (s *squid) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	run, err := nodeagent.StartSquid(shared.squidPath, s.cfg, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	s.run = run
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := nodeagent.WaitListening(ctx, s.cfg.ListenAddr(), run.Done()); err != nil {
		_ = run.Stop(time.Second)
		s.t.Fatalf("squid on %s: %v", s.cfg.ListenAddr(), err)
	}
}

// kill crashes squid (SIGKILL) and waits until the process is gone.
func (s *squid) kill() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.run.Kill(); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.run.Done():
	case <-time.After(10 * time.Second):
		s.t.Fatal("squid did not die")
	}
}

func (s *squid) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		if err := s.run.Stop(3 * time.Second); err != nil {
			s.t.Errorf("stopping squid: %v", err)
		}
	}
}

func (s *squid) url() string {
	return "http://" + s.cfg.ListenAddr()
}

// accessLog returns squid's access log lines.
func (s *squid) accessLog() []string {
	b, err := os.ReadFile(s.cfg.AccessLogPath())
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// countAccess counts access log lines containing all of substrs.
func (s *squid) countAccess(substrs ...string) int {
	n := 0
	for _, l := range s.accessLog() {
		all := true
		for _, sub := range substrs {
			all = all && strings.Contains(l, sub)
		}
		if all {
			n++
		}
	}
	return n
}

// origins are the probe targets: plain HTTP and TLS, answering 200 on "/"
// and 503 on "/broken".
type origins struct {
	plain, tls *httptest.Server
}

func startOrigins(t *testing.T) *origins {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/broken" {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	o := &origins{plain: httptest.NewServer(h), tls: httptest.NewTLSServer(h)}
	t.Cleanup(o.plain.Close)
	t.Cleanup(o.tls.Close)
	return o
}

// caBundle is the TLS origin's certificate as spec.healthCheck.tls.caBundle.
func (o *origins) caBundle() *crawlv1alpha1.HealthCheckTLS {
	return &crawlv1alpha1.HealthCheckTLS{
		CABundle: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: o.tls.Certificate().Raw})),
	}
}

// healthCondition returns the Healthy condition or nil.
func healthCondition(p *crawlv1alpha1.Proxy) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy)
}
