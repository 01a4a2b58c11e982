package operatore2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	artifacts "github.com/proxy-operator/proxy-operator/artifacts/apiserver"
	"github.com/proxy-operator/proxy-operator/artifacts/crds"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// nodeName is the node agent's node; the operator pins its pods to it.
const nodeName = "proxylease-e2e-node"

// The agent's loopback range, disjoint from the other test packages'.
var (
	poolFirst = netip.MustParseAddr("127.0.8.2")
	poolLast  = netip.MustParseAddr("127.0.8.250")
)

type env struct {
	cp         *controlplane.ControlPlane
	admin      *rest.Config
	client     client.Client
	leasing    versioned.Interface
	target     *httptest.Server
	targetHits atomic.Int64
	discovery  string // the operator's HTTP discovery API
	kubectlBin string
	cacheDir   string
	logDir     string
}

var shared *env

func TestMain(m *testing.M) { os.Exit(framework.Main(m, "apiserver-operator", start)) }

// start brings up the package's control plane, a node agent running real
// squids, a target site, the operator in process with its aggregated API
// served on loopback, and registers the APIService.
func start(ctx context.Context, fw *framework.Env) (err error) {
	e := &env{logDir: fw.LogDir}
	shared = e
	if _, err := nodeagent.LookSquid(""); err != nil {
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
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	binDir := os.Getenv(controlplane.BinDirEnv)
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	e.kubectlBin = filepath.Join(binDir, "kubectl")
	e.cacheDir = filepath.Join(e.logDir, "kubectl-cache")

	e.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.targetHits.Add(1)
		fmt.Fprintf(w, "target; via=%s", r.Header.Get("Via"))
	}))
	fw.Defer("target", func() error { e.target.Close(); return nil })

	agentLog, err := fw.Logger("nodeagent.log")
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(e.admin, nodeagent.Options{NodeName: nodeName, Log: agentLog, PoolFirst: poolFirst, PoolLast: poolLast})
	if err != nil {
		return err
	}
	if err := fw.Go(ctx, "node agent", agent.Run, agent.Ready()); err != nil {
		return err
	}

	// The serving certificate the APIService verifies: for the Service's DNS
	// name, which kube-apiserver uses as TLS server name.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("proxy-lease-api.proxy-operator-system.svc",
		[]net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(e.logDir, "serving.crt"), filepath.Join(e.logDir, "serving.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	ports, err := ports.Free(2)
	if err != nil {
		return err
	}
	apiPort, discoveryPort := ports[0], ports[1]
	e.discovery = fmt.Sprintf("http://127.0.0.1:%d", discoveryPort)

	opts := app.NewOptions()
	// Its proxy auth key Secret goes there; the proxies check credentials.
	opts.Namespace = "default"
	opts.MetricsAddr = "0"
	opts.HealthProbeAddr = "0"
	opts.Kubernetes.NodeName = nodeName
	framework.AllowLocalOrigins(&opts.ProxyAuth)
	opts.Intervals.ProvisioningPoll = 250 * time.Millisecond
	opts.Intervals.DeletionPoll = 250 * time.Millisecond
	opts.Intervals.RequeueNow = 50 * time.Millisecond
	opts.Health.Tick = 100 * time.Millisecond
	opts.Discovery.Addr = fmt.Sprintf("127.0.0.1:%d", discoveryPort)
	// Plain HTTP, asked for: this test is about the lease path, on loopback;
	// TLS on the HTTP API is covered by test/e2e/dev and pkg/discovery.
	opts.Discovery.PlainHTTP = true
	opts.APIServer.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	opts.APIServer.SecureServing.BindPort = apiPort
	opts.APIServer.SecureServing.ServerCert.CertKey.CertFile = certFile
	opts.APIServer.SecureServing.ServerCert.CertKey.KeyFile = keyFile
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("operator options: %w", err)
	}
	opLog, err := fw.Logger("operator.log")
	if err != nil {
		return err
	}
	ctrl.SetLogger(opLog)
	if err := fw.Go(log.IntoContext(ctx, opLog), "operator", func(ctx context.Context) error {
		return app.Run(ctx, e.admin, opts)
	}, nil); err != nil {
		return err
	}

	dev, err := fs.ReadFile(artifacts.Dev, "dev/apiservice.yaml")
	if err != nil {
		return err
	}
	blocks := bytes.SplitAfter(certPEM, []byte("-----END CERTIFICATE-----\n"))
	ca := blocks[len(blocks)-2] // the chain ends with the signing CA
	manifest := strings.Replace(string(dev), "  versionPriority: 15\n", "  versionPriority: 15\n  caBundle: "+base64.StdEncoding.EncodeToString(ca)+"\n", 1)
	if !strings.Contains(manifest, "caBundle: ") {
		return errors.New("dev/apiservice.yaml no longer has the field this test writes caBundle after")
	}
	manifest = strings.Replace(manifest, "port: 7443", "port: "+strconv.Itoa(apiPort), 1)
	if _, err := controlplane.ApplyYAML(ctx, e.admin, []byte(manifest)); err != nil {
		return fmt.Errorf("registering the APIService: %w", err)
	}
	return waitAvailable(ctx, e.admin, 120*time.Second)
}

func waitAvailable(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		u, err := dyn.Resource(gvr).Get(ctx, "v1alpha1.leasing.crawl.example.com", metav1.GetOptions{})
		if err != nil {
			continue
		}
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
	return fmt.Errorf("APIService not Available after %s (last: %s)", timeout, last)
}

func kubectlIn(t testing.TB, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, shared.kubectlBin, append([]string{"--kubeconfig", shared.cp.KubeconfigPath, "--cache-dir", shared.cacheDir}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func mustKubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := kubectlIn(t, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func namespace(t testing.TB, name string) string {
	t.Helper()
	if err := shared.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}
