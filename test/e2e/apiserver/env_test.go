package apiservere2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	artifacts "github.com/proxy-operator/proxy-operator/artifacts/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

// outcomeLog records every counted lease request, per API.
type outcomeLog struct {
	mu  sync.Mutex
	got map[string][]string
}

func (o *outcomeLog) LeaseRequest(api, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.got == nil {
		o.got = map[string][]string{}
	}
	o.got[api] = append(o.got[api], outcome)
}

// since returns the outcomes of api counted after the first n.
func (o *outcomeLog) since(api string, n int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got[api][min(n, len(o.got[api])):]...)
}

func (o *outcomeLog) count(api string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.got[api])
}

// genericPathEnv, set, runs the aggregated server without its lean path, for
// before/after benchmarks.
const genericPathEnv = "PROXY_OPERATOR_BENCH_GENERIC_PATH"

// OperatorUser is the identity the aggregated server delegates with: the
// operator's ServiceAccount, bound only by artifacts/apiserver/rbac.yaml.
const OperatorUser = "system:serviceaccount:proxy-operator-system:proxy-operator"

// env is the one environment every test of the package shares: starting a
// control plane costs about 15 s on two cores.
type env struct {
	// outcomes records proxy_operator_lease_requests_total as the operator counts it.
	outcomes *outcomeLog
	cp       *controlplane.ControlPlane
	admin    *rest.Config
	kube     kubernetes.Interface
	leasing  versioned.Interface
	store    *lease.Store
	server   *apiserver.Server
	httpURL  string
	// serverURL reaches the aggregated server directly, not through kube-apiserver.
	serverURL  string
	kubectlBin string
	cacheDir   string
	// readyBeforeStart is server.Ready before the server started listening.
	readyBeforeStart error
}

var shared *env

func TestMain(m *testing.M) {
	flag.Parse()
	if spec := os.Getenv(loadSpecEnv); spec != "" {
		// The cost benchmark's client process: no environment of its own.
		os.Exit(loadGeneratorMain(spec))
	}
	os.Exit(framework.Main(m, "apiserver", start))
}

// start brings up the package's control plane, the operator's delegation
// RBAC as shipped, the aggregated server and the HTTP API over one lease
// store (as the operator wires them), and registers the APIService.
func start(ctx context.Context, fw *framework.Env) (err error) {
	cp, err := fw.ControlPlane(ctx, controlplane.Options{SkipCRDs: true})
	if err != nil {
		return err
	}
	e := &env{cp: cp, admin: cp.RESTConfig()}
	shared = e
	if e.kube, err = kubernetes.NewForConfig(e.admin); err != nil {
		return err
	}
	if e.leasing, err = versioned.NewForConfig(e.admin); err != nil {
		return err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	binDir := os.Getenv(controlplane.BinDirEnv)
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	e.kubectlBin = filepath.Join(binDir, "kubectl")
	e.cacheDir = filepath.Join(cp.Dir, "kubectl-cache")

	// The operator's delegation RBAC, exactly as shipped.
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "proxy-operator-system"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := controlplane.ApplyFS(ctx, e.admin, onlyFiles(artifacts.FS, "rbac.yaml", "clusterroles.yaml")); err != nil {
		return fmt.Errorf("applying RBAC: %w", err)
	}
	operatorCfg, err := cp.ClientConfigFor(OperatorUser, "system:serviceaccounts", "system:serviceaccounts:proxy-operator-system")
	if err != nil {
		return err
	}

	e.store, err = lease.New(lease.Options{MaxLeasesPerProxy: 1, CooldownWindow: time.Minute}, nil)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	e.serverURL = "https://" + ln.Addr().String()
	opts := apiserver.NewOptions()
	opts.SecureServing.Listener = ln
	opts.SecureServing.BindPort = port
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	if os.Getenv(genericPathEnv) != "" {
		// The server as it was before the lean path (docs/benchmarks.md):
		// every request through the generic chain, reviewed, over HTTP/2.
		opts.TrustFrontProxyAuthorization = false
		opts.SecureServing.DisableHTTP2Serving = false
	}
	// Both APIs through their services over one store and one queue, as the
	// operator wires them.
	leases := leasing.NewWithStore(e.store, leasing.DefaultOptions(), clock.RealClock{})
	fw.Defer("leasing", func() error { return leases.Shutdown(context.Background()) })
	e.outcomes = &outcomeLog{}
	kubeSvc, err := leases.Service(leasing.APIKubernetes, opts.MaxWait, e.outcomes)
	if err != nil {
		return err
	}
	httpSvc, err := leases.Service(leasing.APIHTTP, discovery.DefaultMaxWait, e.outcomes)
	if err != nil {
		return err
	}
	e.server, err = apiserver.New(opts, apiserver.Deps{Service: kubeSvc, RESTConfig: operatorCfg})
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("building the aggregated server: %w", err)
	}
	// Info, not debug: the discovery server logs every request at debug level.
	logger := zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapcore.InfoLevel))
	srvCtx, cancelSrv := context.WithCancel(log.IntoContext(ctx, logger))
	srvDone := make(chan error, 1)
	e.readyBeforeStart = e.server.Ready(nil)
	go func() { srvDone <- e.server.Start(srvCtx) }()
	go func() { _ = e.store.Start(srvCtx) }()
	fw.Defer("aggregated server", func() error {
		cancelSrv()
		start := time.Now()
		select {
		case err := <-srvDone:
			if took := time.Since(start); took > 5*time.Second {
				fmt.Fprintf(os.Stderr, "the aggregated server took %s to stop\n", took)
			}
			return err
		case <-time.After(30 * time.Second):
			return errors.New("did not stop within 30s")
		}
	})

	// The HTTP discovery API over the same store.
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	disc, err := discovery.New(discovery.Options{Service: httpSvc})
	if err != nil {
		return err
	}
	go func() { _ = disc.Serve(srvCtx, httpLn) }()
	e.httpURL = "http://" + httpLn.Addr().String()

	// Register through the dev manifests, verified with this server's CA
	// (the operator would write its own), on this run's port.
	dev, err := fs.ReadFile(artifacts.Dev, "dev/apiservice.yaml")
	if err != nil {
		return err
	}
	manifest := strings.Replace(string(dev), "  versionPriority: 15\n",
		"  versionPriority: 15\n  caBundle: "+base64.StdEncoding.EncodeToString(e.server.CABundle())+"\n", 1)
	manifest = strings.Replace(manifest, "port: 7443", "port: "+strconv.Itoa(port), 1)
	if strings.Contains(manifest, "insecureSkipTLSVerify") || !strings.Contains(manifest, "caBundle: ") || !strings.Contains(manifest, "port: "+strconv.Itoa(port)) {
		return errors.New("dev/apiservice.yaml no longer has the fields this test rewrites")
	}
	if _, err := controlplane.ApplyYAML(ctx, e.admin, []byte(manifest)); err != nil {
		return fmt.Errorf("applying the APIService: %w", err)
	}
	if err := waitAvailable(ctx, e.admin, 90*time.Second); err != nil {
		return err
	}
	return nil
}

func onlyFiles(fsys fs.FS, names ...string) fs.FS {
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	return filteredFS{fsys, keep}
}

type filteredFS struct {
	fs.FS
	keep map[string]bool
}

func (f filteredFS) ReadDir(name string) ([]fs.DirEntry, error) {
	all, err := fs.ReadDir(f.FS, name)
	if err != nil {
		return nil, err
	}
	var out []fs.DirEntry
	for _, d := range all {
		if f.keep[d.Name()] {
			out = append(out, d)
		}
	}
	return out, nil
}

func waitAvailable(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		u, err := dyn.Resource(gvr).Get(ctx, "v1alpha1.leasing.crawl.example.com", metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Available" {
					last = fmt.Sprintf("%v: %v", m["reason"], m["message"])
					if m["status"] == "True" {
						return nil
					}
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("APIService v1alpha1.leasing.crawl.example.com not Available after %s (last: %s)", timeout, last)
}

// kubectl runs bin/kubectl against the admin kubeconfig.
func kubectl(t testing.TB, args ...string) (string, string, error) {
	t.Helper()
	return kubectlIn(t, "", args...)
}

// kubectlIn runs kubectl with stdin.
func kubectlIn(t testing.TB, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append([]string{"--kubeconfig", shared.cp.KubeconfigPath, "--cache-dir", shared.cacheDir}, args...)
	cmd := exec.CommandContext(ctx, shared.kubectlBin, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func mustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, errOut, err := kubectl(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// namespace creates a fresh namespace for one test (namespaces are never
// finalized here: there is no controller-manager, so names are unique).
func namespace(t testing.TB, name string) string {
	t.Helper()
	_, err := shared.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// addProxy puts a healthy proxy into the store (the reconciler's job in the
// full system) and removes it when the test ends.
func addProxy(t testing.TB, ns, name string, attrs map[string]string) lease.ProxyInfo {
	t.Helper()
	p := lease.ProxyInfo{
		Namespace: ns, Name: name, URL: "http://127.0.0.1:3128", Host: "127.0.0.1", Port: 3128,
		Attributes: attrs, LatencyMillis: 7, Healthy: true,
	}
	shared.store.UpsertProxy(p)
	t.Cleanup(func() {
		for _, l := range shared.store.List(ns) {
			shared.store.Release(l.ID)
		}
		shared.store.RemoveProxy(p.Key())
	})
	return p
}
