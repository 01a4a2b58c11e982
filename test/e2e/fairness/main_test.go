package fairnesse2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	artifacts "github.com/proxy-operator/proxy-operator/artifacts/apiserver"
	"github.com/proxy-operator/proxy-operator/artifacts/crds"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

const (
	// testNamespace holds the one Proxy; ProxyLeases can only lease Proxies
	// of their own namespace, so every test leases here.
	testNamespace = "fairness"
	proxyName     = "squid-fair"
	// queueMaxPerFlow is small so a full queue is easy to reach (test 4);
	// the fairness tests never have more than one waiting request per flow.
	queueMaxPerFlow = 2
	// queueRetryAfter differs from the default (1s) so the answers show the
	// option is honoured.
	queueRetryAfter = 3 * time.Second
)

// The squid's loopback range: disjoint from the other e2e packages' (127.0.6.x
// test/e2e, 127.0.8.x test/e2e/apiserver/operator, 127.0.9.2-60 test/e2e/dev).
var (
	squidFirst = netip.MustParseAddr("127.0.9.200")
	squidLast  = netip.MustParseAddr("127.0.9.250")
)

// shared is the environment of every test; set by TestMain.
var shared *env

type env struct {
	cp    *controlplane.ControlPlane
	admin *rest.Config
	// client is an admin controller-runtime client; leasing an admin clientset.
	client  client.Client
	leasing versioned.Interface
	target  *httptest.Server
	squid   *nodeagent.Squid

	// discovery is the operator's HTTP discovery API.
	discovery string
	// tokens maps each HTTP identity (httpIdentities) to its bearer token.
	tokens map[string]string
	// metrics is the operator's /metrics URL, readyz its readiness URL.
	metrics, readyz string

	logDir string
	fw     *framework.Env
}

func TestMain(m *testing.M) { os.Exit(framework.Main(m, "fairness", start)) }

// start brings up the package's control plane, a target site, one squid of
// its own, the operator in process with both lease APIs on loopback, the
// APIService, and the one Proxy every test leases.
func start(ctx context.Context, fw *framework.Env) (err error) {
	e := &env{logDir: fw.LogDir, fw: fw}
	shared = e
	squidPath, err := nodeagent.LookSquid("")
	if err != nil {
		return fmt.Errorf("%w (this e2e runs real squid)", err)
	}
	if e.cp, err = fw.ControlPlane(ctx, controlplane.Options{CRDFS: crds.FS}); err != nil {
		return err
	}
	e.admin = e.cp.RESTConfig()
	scheme, err := app.NewScheme()
	if err != nil {
		return err
	}
	if e.client, err = framework.Client(e.cp, scheme); err != nil {
		return err
	}
	if e.leasing, err = versioned.NewForConfig(e.admin); err != nil {
		return err
	}

	// The site the health check fetches through squid.
	e.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "fairness target; via=%s", r.Header.Get("Via"))
	}))
	fw.Defer("target", func() error { e.target.Close(); return nil })

	if err := e.startSquid(ctx, squidPath); err != nil {
		return err
	}

	opts, err := e.operatorOptions()
	if err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("operator options: %w", err)
	}
	opLog, err := fw.Logger("operator.log")
	if err != nil {
		return err
	}
	// One log for the operator, controller-runtime and the aggregated
	// server's klog, shown when a test fails instead of on every run.
	ctrl.SetLogger(opLog)
	klog.SetLogger(opLog)
	if err := fw.Go(log.IntoContext(ctx, opLog), "operator", func(ctx context.Context) error {
		return app.Run(ctx, e.admin, opts)
	}, nil); err != nil {
		return err
	}
	if err := e.registerAPIService(ctx, opts.APIServer.SecureServing.BindPort); err != nil {
		return err
	}
	if err := waitFor(ctx, 60*time.Second, "the operator to be ready", func() (bool, string) {
		code, body, err := httpGet(e.readyz, "")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
	}); err != nil {
		return err
	}
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", testNamespace, err)
	}
	if err := e.createProxy(ctx); err != nil {
		return err
	}
	return nil
}

// startSquid runs one squid on the first free address of the package's range.
func (e *env) startSquid(ctx context.Context, squidPath string) error {
	var addr netip.Addr
	for a := squidFirst; a.Compare(squidLast) <= 0; a = a.Next() {
		if nodeagent.PortFree(net.JoinHostPort(a.String(), strconv.Itoa(nodeagent.DefaultSquidPort))) {
			addr = a
			break
		}
	}
	if !addr.IsValid() {
		return fmt.Errorf("no free squid address in %s-%s", squidFirst, squidLast)
	}
	dir := filepath.Join(e.logDir, "squid")
	// squid runs as its own user: it must write in dir and traverse its parent.
	if err := os.Mkdir(dir, 0o777); err != nil {
		return err
	}
	for _, d := range []string{e.logDir, dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			return err
		}
	}
	cfg := nodeagent.SquidConfig{Addr: addr, Dir: dir, VisibleHostname: "fairness-e2e"}
	sq, err := nodeagent.StartSquid(squidPath, cfg, nil)
	if err != nil {
		return err
	}
	e.squid = sq
	e.fw.Defer("squid", func() error { return sq.Stop(5 * time.Second) })
	e.fw.ShowLog("squid/cache.log", 80)
	// Framework.Main fails the package when a squid outlives it; that check
	// must be able to see one: ours, while it runs (before it stops).
	e.fw.Defer("squid check", func() error {
		if running := framework.SquidChildren(); len(running) != 1 || !strings.HasPrefix(running[0], strconv.Itoa(sq.PID())+":") {
			return fmt.Errorf("squid children %v, want exactly ours (pid %d)", running, sq.PID())
		}
		return nil
	})
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := nodeagent.WaitListening(wctx, cfg.ListenAddr(), sq.Done()); err != nil {
		return fmt.Errorf("squid on %s: %w", cfg.ListenAddr(), err)
	}
	return nil
}

// operatorOptions are the production defaults with every listener on a free
// loopback port, one exclusive lease per proxy, two bearer tokens (two
// identities) from a token file, a small per-flow queue and a distinctive
// Retry-After.
func (e *env) operatorOptions() (*app.Options, error) {
	ports, err := ports.Free(4)
	if err != nil {
		return nil, err
	}
	metricsPort, probePort, discoveryPort, apiPort := ports[0], ports[1], ports[2], ports[3]
	e.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	e.readyz = fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	e.discovery = fmt.Sprintf("http://127.0.0.1:%d", discoveryPort)

	// One token per HTTP crawler: the identity a token stands for is its
	// fairness flow ("http:<identity>").
	e.tokens = map[string]string{}
	file := "# fairness e2e: token,identity\n"
	for _, id := range httpIdentities {
		raw := make([]byte, 16)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		e.tokens[id] = hex.EncodeToString(raw)
		file += e.tokens[id] + "," + id + "\n"
	}
	tokenFile := filepath.Join(e.logDir, "discovery-tokens")
	if err := os.WriteFile(tokenFile, []byte(file), 0o600); err != nil {
		return nil, err
	}

	// The serving certificate the APIService verifies: for the Service's
	// DNS name, which kube-apiserver uses as the TLS server name.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("proxy-lease-api.proxy-operator-system.svc",
		[]net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(e.logDir, "serving.crt"), filepath.Join(e.logDir, "serving.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}

	opts := app.NewOptions()
	// Its proxy auth key Secret goes there; the proxies check credentials.
	opts.Namespace = "default"
	opts.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", metricsPort)
	opts.HealthProbeAddr = fmt.Sprintf("127.0.0.1:%d", probePort)
	opts.Intervals.RequeueNow = 50 * time.Millisecond
	opts.Health.Tick = 100 * time.Millisecond
	opts.Discovery.Addr = fmt.Sprintf("127.0.0.1:%d", discoveryPort)
	framework.AllowLocalOrigins(&opts.ProxyAuth)
	opts.Discovery.TokenFile = tokenFile
	// Plain HTTP, asked for: this test is about the lease path, on loopback;
	// TLS on the HTTP API is covered by test/e2e/dev and pkg/discovery.
	opts.Discovery.PlainHTTP = true
	opts.Leasing.MaxLeasesPerProxy = 1
	opts.Leasing.QueueMaxPerFlow = queueMaxPerFlow
	opts.Leasing.QueueRetryAfter = queueRetryAfter
	opts.APIServer.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	opts.APIServer.SecureServing.BindPort = apiPort
	opts.APIServer.SecureServing.ServerCert.CertKey.CertFile = certFile
	opts.APIServer.SecureServing.ServerCert.CertKey.KeyFile = keyFile
	return opts, nil
}

// registerAPIService applies the dev APIService on this run's port, verified
// with the serving certificate's CA, and waits until it is Available.
func (e *env) registerAPIService(ctx context.Context, port int) error {
	dev, err := fs.ReadFile(artifacts.Dev, "dev/apiservice.yaml")
	if err != nil {
		return err
	}
	certPEM, err := os.ReadFile(filepath.Join(e.logDir, "serving.crt"))
	if err != nil {
		return err
	}
	blocks := bytes.SplitAfter(certPEM, []byte("-----END CERTIFICATE-----\n"))
	if len(blocks) < 2 {
		return errors.New("the serving certificate has no CA block")
	}
	ca := blocks[len(blocks)-2] // the chain ends with the signing CA
	manifest := strings.Replace(string(dev), "  versionPriority: 15\n", "  versionPriority: 15\n  caBundle: "+base64.StdEncoding.EncodeToString(ca)+"\n", 1)
	manifest = strings.Replace(manifest, "port: 7443", "port: "+strconv.Itoa(port), 1)
	if strings.Contains(manifest, "insecureSkipTLSVerify") || !strings.Contains(manifest, "caBundle: ") || !strings.Contains(manifest, "port: "+strconv.Itoa(port)) {
		return errors.New("dev/apiservice.yaml no longer has the fields this test rewrites")
	}
	if _, err := controlplane.ApplyYAML(ctx, e.admin, []byte(manifest)); err != nil {
		return fmt.Errorf("registering the APIService: %w", err)
	}
	dyn, err := dynamic.NewForConfig(e.admin)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	return waitFor(ctx, 120*time.Second, "the APIService to be Available", func() (bool, string) {
		u, err := dyn.Resource(gvr).Get(ctx, "v1alpha1.leasing.crawl.example.com", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Available" {
				return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"])
			}
		}
		return false, "no Available condition"
	})
}

// createProxy creates the one External Proxy in front of the squid and waits
// until the lease store offers it (healthy in the discovery API's list).
func (e *env) createProxy(ctx context.Context) error {
	addr := e.squid.Config().Addr
	// Slow probes: the tests need a proxy that stays healthy, not quick
	// detection, and each probe is work on a busy machine.
	p := builders.Proxy(testNamespace, proxyName).External(addr.String(), nodeagent.DefaultSquidPort).Attr("pool", "fairness").
		Probe(e.target.URL+"/healthz", 5, 3).FailureThreshold(5).Obj()
	if err := e.client.Create(ctx, p); err != nil {
		return fmt.Errorf("creating Proxy %s: %w", proxyName, err)
	}
	return waitFor(ctx, 90*time.Second, "the Proxy to be leasable", func() (bool, string) {
		code, body, err := httpGet(e.discovery+"/v1/proxies?healthy=true&namespace="+testNamespace, e.tokens[httpIdentities[0]])
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %s %v", code, body, err)
		}
		var list wire.ProxyList
		if err := json.Unmarshal(body, &list); err != nil {
			return false, err.Error()
		}
		return list.Count == 1 && list.Proxies[0].Name == proxyName, string(body)
	})
}

// waitFor polls cond every 100ms until it holds or timeout passes; the error
// carries cond's last description.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, desc := cond()
		if ok {
			return nil
		}
		last = desc
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not done after %s (last: %s)", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// httpGet GETs url (with a bearer token when not empty).
func httpGet(url, token string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}
