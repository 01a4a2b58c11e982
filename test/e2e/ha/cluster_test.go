package ha

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

const (
	ns          = "proxy-operator-system"
	crawlNS     = "crawl"
	deployment  = "proxy-operator"
	apiService  = "v1alpha1.leasing.crawl.example.com"
	podSelector = "app.kubernetes.io/name=proxy-operator"
	// proxies are the fleet the load leases, capacity 1 each (the
	// install's default), fewer than the clients so that they contend.
	proxies = 6
)

// serviceMonitorCRD stands for the Prometheus Operator's CRD, which a
// platform with the production overlay's ServiceMonitor has installed.
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// cluster is a control plane with kube-controller-manager, two node agents
// that run the operator's pods as processes, the Service proxy, and the
// production install applied with kubectl.
type cluster struct {
	cp      *controlplane.ControlPlane
	kube    kubernetes.Interface
	leasing versioned.Interface
	dyn     dynamic.Interface
	svc     *nodeagent.ServiceProxy
	agents  []*nodeagent.Agent
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs pods in mount namespaces and Services on port 443: it needs root")
	}
	// The operator's pods run this tree's binary, built here. Its logs, the
	// node agents' and the pods' stay after the test with E2E_KEEP_LOGS set.
	dir := t.TempDir()
	if os.Getenv("E2E_KEEP_LOGS") != "" {
		var err error
		if dir, err = os.MkdirTemp("", "proxy-operator-ha-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("logs kept in %s", dir)
	}
	binary, err := framework.OperatorBinary(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp := controlplane.StartForTest(t, controlplane.Options{SkipCRDs: true, ControllerManager: true,
		APIServerFlags: map[string]string{"service-cluster-ip-range": nodeagent.ServiceNetwork.String()}})
	cfg := cp.RESTConfig()
	c := &cluster{cp: cp}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.leasing, err = versioned.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs, err := framework.FileLogger(filepath.Join(dir, "nodeagents.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(logs)
	if c.svc, err = nodeagent.NewServiceProxy(cfg, logs.WithName("services")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	go func() { done <- c.svc.Run(ctx) }()
	sel, err := labels.Parse(podSelector)
	if err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{"node-a", "node-b"} {
		a, err := nodeagent.New(cfg, nodeagent.Options{
			NodeName: node, Tag: "none", BaseDir: filepath.Join(dir, node), Log: logs,
			Pods: &nodeagent.PodOptions{
				Selector: sel, Binary: binary, Subnet: uint8(i + 1), Bind: true,
				APIServer: cp.Host, CAFile: cp.CACertPath, Services: c.svc,
				// The aggregated API server binds every interface unless told.
				AddArgs: []string{"--apiserver-bind-address"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		c.agents = append(c.agents, a)
		go func() { done <- a.Run(ctx) }()
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs(t, filepath.Join(dir, "nodeagents.log"))
		}
		cancel()
		for range 3 {
			if err := <-done; err != nil {
				t.Errorf("node agent or Service proxy: %v", err)
			}
		}
	})
	<-c.svc.Synced()
	return c
}

func (c *cluster) dumpLogs(t *testing.T, agentLog string) {
	for _, a := range c.agents {
		names := make([]string, 0)
		logs := a.PodLogs()
		for k := range logs {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, n := range names {
			t.Logf("--- %s (%s) ---\n%s", n, a.NodeName(), logtail.File(logs[n], 40))
		}
	}
	t.Logf("--- node agents ---\n%s", logtail.File(agentLog, 60))
	for _, args := range [][]string{{"get", "pods,rs,deploy,endpointslices,nodes", "-A", "-o", "wide"}, {"get", "events", "-A"}} {
		out, _ := c.kubectlRun(context.Background(), nil, args...)
		t.Logf("--- kubectl %s ---\n%s", strings.Join(args, " "), out)
	}
}

// kubectlRun runs bin/kubectl against the control plane.
func (c *cluster) kubectlRun(ctx context.Context, stdin []byte, args ...string) (string, error) {
	return c.cp.Kubectl(ctx, stdin, args...)
}

// install applies the Prometheus Operator's CRD and then
// `kubectl apply -k artifacts/install/overlays/production`, and waits for
// both pods Ready and the APIService Available.
func (c *cluster) install(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if out, err := c.kubectlRun(ctx, []byte(serviceMonitorCRD), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply (ServiceMonitor CRD): %v\n%s", err, out)
	}
	if out, err := c.kubectlRun(ctx, nil, "wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com", "--timeout=60s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	var out string
	var err error
	// A fresh cluster may need a second pass (CRDs before their objects).
	for range 3 {
		if out, err = c.kubectlRun(ctx, nil, "apply", "-k", "artifacts/install/overlays/production"); err == nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if err != nil {
		t.Fatalf("kubectl apply -k artifacts/install/overlays/production: %v\n%s", err, out)
	}
	if out, err := c.kubectlRun(ctx, nil, "-n", ns, "rollout", "status", "deployment/"+deployment, "--timeout=180s"); err != nil {
		t.Fatalf("kubectl rollout status after the install: %v\n%s", err, out)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 120*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.apiServiceAvailable(ctx), nil
	}); err != nil {
		t.Fatalf("APIService %s never Available: %v", apiService, err)
	}
}

// apiServiceAvailable reads the APIService's Available condition.
func (c *cluster) apiServiceAvailable(ctx context.Context) bool {
	ok, _ := c.apiServiceCondition(ctx)
	return ok
}

// apiServiceCondition reads the APIService's Available condition and, when
// it is not True, why.
func (c *cluster) apiServiceCondition(ctx context.Context) (bool, string) {
	return framework.APIServiceAvailable(ctx, c.dyn, apiService)
}

// fleet starts proxies squids on loopback, an origin for their health
// checks, and the External Proxies for them.
func (c *cluster) fleet(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(origin.Close)
	pool, err := nodeagent.NewAddrPool(netip.MustParseAddr("127.0.0.200"), netip.MustParseAddr("127.0.0.230"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crawlNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheme, err := app.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.cp.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for i := range proxies {
		sq := framework.StartSquid(t, pool, fmt.Sprintf("ha-%d", i))
		host, port, _ := net.SplitHostPort(sq.Config().ListenAddr())
		var p32 int32
		fmt.Sscan(port, &p32)
		p := builders.Proxy(crawlNS, fmt.Sprintf("p%d", i)).External(host, p32).Probe(origin.URL, 0, 0).Obj()
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

// httpClient is a client of the HTTP lease API at its in-cluster URL,
// through the Service proxy, with the install's generated token and CA.
func (c *cluster) httpClient(t *testing.T) *dclient.Client {
	t.Helper()
	ctx := context.Background()
	var tokens discovery.Tokens
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		ts := &discovery.TokenSecret{Secrets: c.kube.CoreV1(), Namespace: ns, Name: "proxy-operator-discovery-token"}
		var err error
		tokens, err = ts.Load(ctx)
		return err == nil && len(tokens) > 0, nil
	}); err != nil {
		t.Fatalf("the install's discovery token: %v", err)
	}
	var token string
	for tk := range tokens {
		token = tk
	}
	cm, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, certs.DefaultCAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(cm.Data[certs.KeyCAConfigMap])) {
		t.Fatal("the operator's CA ConfigMap holds no certificate")
	}
	tr := &http.Transport{DialContext: c.svc.DialContext, TLSClientConfig: &tls.Config{RootCAs: roots}, MaxIdleConnsPerHost: 64}
	cl, err := dclient.New("https://proxy-operator-discovery."+ns+".svc:8090", token, dclient.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// leaderPod is the pod annotated as the leader, "" while none is.
func (c *cluster) leaderPod(ctx context.Context) (name, node string) {
	list, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: podSelector})
	if err != nil {
		return "", ""
	}
	for _, p := range list.Items {
		if p.Annotations["leasing.crawl.example.com/leader"] == "true" && p.DeletionTimestamp == nil {
			return p.Name, p.Spec.NodeName
		}
	}
	return "", ""
}

// settled: the Deployment has two Ready replicas of its current template, the
// APIService is Available and a leader is annotated.
func (c *cluster) settled(ctx context.Context) bool {
	d, err := c.kube.AppsV1().Deployments(ns).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil || d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != 2 || d.Status.ReadyReplicas != 2 || d.Status.Replicas != 2 {
		return false
	}
	leader, _ := c.leaderPod(ctx)
	return leader != "" && c.apiServiceAvailable(ctx)
}

func (c *cluster) waitSettled(t *testing.T, within time.Duration) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		return c.settled(ctx), nil
	}); err != nil {
		t.Fatalf("the install did not settle (two Ready replicas, a leader, APIService Available): %v", err)
	}
}
