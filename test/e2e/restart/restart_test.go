package restart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	artifacts "github.com/proxy-operator/proxy-operator/artifacts/apiserver"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"

	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/logtail"
)

const (
	operatorNS  = "proxy-operator-system"
	crawlNS     = "crawl"
	proxies     = 100
	httpLeases  = 9000
	kubeLeases  = 1000
	cooldowns   = 1000
	workers     = 16
	leaseTTL    = 3600
	tokenSecret = "discovery-tokens"
	certSecret  = "serving-cert"
)

var proxyLeaseGVR = schema.GroupVersionResource{Group: "leasing.crawl.example.com", Version: "v1alpha1", Resource: "proxyleases"}

// forwardProxy forwards absolute-URI requests (what a client sends a proxy).
func forwardProxy() http.Handler {
	tr := &http.Transport{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		out := r.Clone(r.Context())
		out.RequestURI = ""
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}

type env struct {
	cp      *controlplane.ControlPlane
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	binary  string
	dir     string
	ports   [4]int // discovery, probes, aggregated API, metrics
	fwdHost string
	fwdPort int32
	origin  string
}

func setup(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{dir: dir}
	var err error
	if e.binary, err = framework.OperatorBinary(dir); err != nil {
		t.Fatal(err)
	}
	e.cp = controlplane.StartForTest(t, controlplane.Options{})
	if e.kube, err = kubernetes.NewForConfig(e.cp.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(e.cp.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	ports, err := ports.Free(len(e.ports))
	if err != nil {
		t.Fatal(err)
	}
	e.ports = [4]int(ports)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(origin.Close)
	fwd := httptest.NewServer(forwardProxy())
	t.Cleanup(fwd.Close)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(fwd.URL, "http://"))
	p, _ := strconv.Atoi(port)
	e.fwdHost, e.fwdPort, e.origin = host, int32(p), origin.URL
	e.register(t)
	return e
}

// register applies the dev APIService (ExternalName localhost, this run's
// port, no caBundle: the operator writes it) and the Proxies.
func (e *env) register(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	dev, err := fs.ReadFile(artifacts.Dev, "dev/apiservice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(dev), "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil || len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "APIService" {
			unstructured.RemoveNestedField(u.Object, "spec", "insecureSkipTLSVerify")
			_ = unstructured.SetNestedField(u.Object, int64(e.ports[2]), "spec", "service", "port")
		}
		data, _ := yaml.Marshal(u.Object)
		if _, err := controlplane.ApplyYAML(ctx, e.cp.RESTConfig(), data); err != nil {
			t.Fatalf("applying %s: %v", u.GetKind(), err)
		}
	}
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crawlNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheme, err := app.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(e.cp.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for i := range proxies {
		name := fmt.Sprintf("p%03d", i)
		p := builders.Proxy(crawlNS, name).External(e.fwdHost, e.fwdPort).Attr("id", name).Probe(e.origin, 0, 0).Obj()
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

// args are the flags of an operator on ports (discovery, probes,
// aggregated API, metrics).
func (e *env) args(ports [4]int) []string {
	return []string{
		"--kubeconfig=" + e.cp.KubeconfigPath, "--namespace=" + operatorNS, "--providers=kubernetes",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[3]),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--discovery-bind-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--discovery-token-secret=" + tokenSecret,
		"--serving-cert-secret=" + certSecret, "--serving-cert-hosts=localhost,127.0.0.1",
		"--apiserver-bind-address=127.0.0.1", "--apiserver-secure-port=" + strconv.Itoa(ports[2]),
		"--lease-checkpoint-secret=leases", "--lease-signing-secret=lease-key", "--max-leases-per-proxy=1000", "--max-lease-ttl=2h",
		"--cooldown-window=1h", "--gc-interval=0",
	}
}

// start runs the operator on e.ports and waits until it serves.
func (e *env) start(t *testing.T) *framework.OperatorProcess {
	t.Helper()
	return e.startOn(t, e.ports, nil, true)
}

// startOn runs an operator on ports with extra flags; with ready it waits
// until it is ready (it serves leases), else only until its probe server
// and HTTP API listen.
func (e *env) startOn(t *testing.T, ports [4]int, extra []string, ready bool) *framework.OperatorProcess {
	t.Helper()
	op, err := framework.StartOperatorProcess(e.binary, filepath.Join(e.dir, fmt.Sprintf("operator-%d.log", ports[0])), append(e.args(ports), extra...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !op.Exited() {
			_ = op.Stop(30 * time.Second)
		}
	})
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		if op.Exited() {
			return false, fmt.Errorf("operator exited: %v", op.Err())
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		if ready && resp.StatusCode != 200 {
			return false, nil
		}
		// And the HTTP lease API listening (it starts beside the probes).
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0]))
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	}); err != nil {
		t.Fatalf("operator not up: %v\n%s", err, logtail.File(filepath.Join(e.dir, fmt.Sprintf("operator-%d.log", ports[0])), 40))
	}
	return op
}

// client is the HTTP API client of the operator on e.ports.
func (e *env) client(t *testing.T) *dclient.Client {
	t.Helper()
	return e.clientOn(t, e.ports)
}

// clientOn is the HTTP API client of the operator on ports, with the
// operator's generated token and CA.
func (e *env) clientOn(t *testing.T, ports [4]int) *dclient.Client {
	t.Helper()
	ctx := context.Background()
	ts := &discovery.TokenSecret{Secrets: e.kube.CoreV1(), Namespace: operatorNS, Name: tokenSecret}
	tokens, err := ts.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var token string
	for tk := range tokens {
		token = tk
	}
	cm, err := e.kube.CoreV1().ConfigMaps(operatorNS).Get(ctx, certs.DefaultCAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(e.dir, "ca.crt")
	if err := os.WriteFile(caFile, []byte(cm.Data[certs.KeyCAConfigMap]), 0o600); err != nil {
		t.Fatal(err)
	}
	roots, err := dclient.LoadCAFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dclient.New(fmt.Sprintf("https://127.0.0.1:%d", ports[0]), token, dclient.WithRootCAs(roots))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitHealthy waits until the operator c talks to sees every proxy healthy
// (through the forward proxy).
func (e *env) waitHealthy(t *testing.T, c *dclient.Client) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		healthy := true
		list, err := c.ListProxies(ctx, dclient.ListOptions{Healthy: &healthy})
		return err == nil && len(list) == proxies, nil
	}); err != nil {
		t.Fatalf("proxies not healthy: %v\n%s", err, logtail.File(filepath.Join(e.dir, fmt.Sprintf("operator-%d.log", e.ports[0])), 40))
	}
}

// waitProxyLeaseAPI waits until kube-apiserver serves ProxyLeases again: it
// marks the APIService unavailable while the operator is down and checks
// it again only after a backoff, so the operator being ready is not enough.
func (e *env) waitProxyLeaseAPI(t *testing.T) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = e.dyn.Resource(proxyLeaseGVR).Namespace(crawlNS).List(ctx, metav1.ListOptions{})
		return last == nil, nil
	}); err != nil {
		t.Fatalf("kube-apiserver does not serve ProxyLeases: %v (last: %v)", err, last)
	}
}

// parallel runs f(i) for i in [0, n) on workers goroutines; the first error wins.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

type heldLease struct {
	id, proxy, expires string
	cooledTarget       string
}

func TestGracefulRestartKeepsEveryLease(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := e.start(t)
	c := e.client(t)
	e.waitHealthy(t, c)
	e.waitProxyLeaseAPI(t)

	held := make([]heldLease, httpLeases)
	if err := parallel(httpLeases, func(i int) error {
		l, err := c.Acquire(ctx, wire.AcquireRequest{Target: fmt.Sprintf("site-%d", i), TTLSeconds: leaseTTL})
		if err != nil {
			return fmt.Errorf("lease %d: %w", i, err)
		}
		held[i] = heldLease{id: l.LeaseID, proxy: l.Proxy.Name, expires: l.ExpiresAt.UTC().Format(time.RFC3339Nano)}
		if i < cooldowns {
			held[i].cooledTarget = fmt.Sprintf("cool-%d", i)
			return c.Report(ctx, l.LeaseID, wire.ResultRateLimited, held[i].cooledTarget)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	kube := e.dyn.Resource(proxyLeaseGVR).Namespace(crawlNS)
	if err := parallel(kubeLeases, func(i int) error {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "leasing.crawl.example.com/v1alpha1", "kind": "ProxyLease",
			"metadata": map[string]any{"name": fmt.Sprintf("pl-%04d", i), "labels": map[string]any{"crawler": "restart"}},
			"spec":     map[string]any{"target": fmt.Sprintf("k-%d", i), "ttlSeconds": int64(leaseTTL)},
		}}
		_, err := kube.Create(ctx, u, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatalf("creating ProxyLeases: %v", err)
	}
	before, err := kube.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Items) != httpLeases+kubeLeases {
		t.Fatalf("listed %d ProxyLeases, want %d (HTTP leases show too)", len(before.Items), httpLeases+kubeLeases)
	}
	type shown struct{ proxy, expires, holder, rv string }
	view := func(l *unstructured.UnstructuredList) map[string]shown {
		out := map[string]shown{}
		for _, it := range l.Items {
			p, _, _ := unstructured.NestedString(it.Object, "status", "proxy", "name")
			x, _, _ := unstructured.NestedString(it.Object, "status", "expiresAt")
			h, _, _ := unstructured.NestedString(it.Object, "status", "holder")
			out[it.GetName()] = shown{p, x, h, it.GetResourceVersion()}
		}
		return out
	}
	beforeView := view(before)

	// The planned restart.
	stopAt := time.Now()
	if err := op.Stop(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	op = e.start(t)
	probe := held[len(held)-1].id
	var back time.Time
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Get(ctx, probe)
		back = time.Now()
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the restarted operator does not serve the lease %s: %v", probe, err)
	}
	t.Logf("planned restart with %d leases and %d cooldowns: lease API unavailable for %s (SIGTERM to the first answer)",
		httpLeases+kubeLeases, cooldowns, back.Sub(stopAt).Round(time.Millisecond))

	var lost []string
	var mu sync.Mutex
	if err := parallel(httpLeases, func(i int) error {
		l, err := c.Get(ctx, held[i].id)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			lost = append(lost, fmt.Sprintf("%s: %v", held[i].id, err))
		case l.Proxy.Name != held[i].proxy || l.ExpiresAt.UTC().Format(time.RFC3339Nano) != held[i].expires:
			lost = append(lost, fmt.Sprintf("%s: proxy %s expires %s, was %s %s", held[i].id, l.Proxy.Name, l.ExpiresAt, held[i].proxy, held[i].expires))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d HTTP leases lost or changed, e.g. %v", len(lost), httpLeases, lost[:min(5, len(lost))])
	}

	e.waitProxyLeaseAPI(t)
	after, err := kube.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("list resourceVersion %s after the restart, %s before: not the same history", after.GetResourceVersion(), before.GetResourceVersion())
	}
	afterView := view(after)
	changed := 0
	for name, b := range beforeView {
		if afterView[name] != b {
			changed++
			if changed <= 3 {
				t.Errorf("ProxyLease %s: %+v after, %+v before", name, afterView[name], b)
			}
		}
	}
	if changed > 0 || len(afterView) != len(beforeView) {
		t.Fatalf("%d ProxyLeases changed, %d listed after vs %d before", changed, len(afterView), len(beforeView))
	}
	// A watch resumes from the list's resourceVersion.
	w, err := kube.Watch(ctx, metav1.ListOptions{ResourceVersion: before.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watch from the pre-restart resourceVersion: %v", err)
	}
	if err := kube.Delete(ctx, "pl-0000", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != "DELETED" {
			t.Errorf("resumed watch: first event %s %v, want the DELETED of pl-0000", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Error("resumed watch delivered nothing")
	}
	w.Stop()

	// Every cooldown holds: the cooled (proxy, target) pair is refused, the
	// same proxy for another target is not (negative control).
	var warm []string
	if err := parallel(cooldowns, func(i int) error {
		h := held[i]
		_, err := c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"id": h.proxy}, Target: h.cooledTarget, TTLSeconds: 60})
		var apiErr *dclient.APIError
		if !errors.As(err, &apiErr) || apiErr.NoMatch == nil || apiErr.NoMatch.InCooldown != 1 {
			mu.Lock()
			warm = append(warm, fmt.Sprintf("%s/%s: %v", h.proxy, h.cooledTarget, err))
			mu.Unlock()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(warm) > 0 {
		t.Fatalf("%d of %d cooldowns lost, e.g. %v", len(warm), cooldowns, warm[:min(5, len(warm))])
	}
	l, err := c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"id": held[0].proxy}, Target: "never-cooled", TTLSeconds: 60})
	if err != nil {
		t.Fatalf("negative control: a warm target on a cooled proxy: %v", err)
	}
	_ = c.Release(ctx, l.LeaseID)

	// SIGKILL: every lease in the last checkpoint survives. Leases granted,
	// then two checkpoint writes seen (the second began after the grants).
	const late = 200
	lateIDs := make([]string, late)
	if err := parallel(late, func(i int) error {
		l, err := c.Acquire(ctx, wire.AcquireRequest{Target: fmt.Sprintf("late-%d", i), TTLSeconds: leaseTTL})
		if err == nil {
			lateIDs[i] = l.LeaseID
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	secretRV := func() string {
		s, err := e.kube.CoreV1().Secrets(operatorNS).Get(ctx, "leases", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.ResourceVersion
	}
	rv := secretRV()
	for range 2 {
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return secretRV() != rv, nil
		}); err != nil {
			t.Fatalf("no checkpoint written after the late leases: %v", err)
		}
		rv = secretRV()
		// A change, so the writer has something to write next tick.
		if l, err := c.Acquire(ctx, wire.AcquireRequest{Target: "tick", TTLSeconds: 60}); err == nil {
			_ = c.Release(ctx, l.LeaseID)
		}
	}
	op.Kill()
	e.start(t)
	var missing []string
	if err := parallel(late, func(i int) error {
		if _, err := c.Get(ctx, lateIDs[i]); err != nil {
			mu.Lock()
			missing = append(missing, fmt.Sprintf("%s: %v", lateIDs[i], err))
			mu.Unlock()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("after SIGKILL, %d of %d checkpointed leases lost, e.g. %v", len(missing), late, missing[:min(5, len(missing))])
	}
	if _, err := c.Get(ctx, held[httpLeases-1].id); err != nil {
		t.Errorf("after SIGKILL, a lease from before the graceful restart: %v", err)
	}
}
