package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/artifacts/crds"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// nodeName is the node agent's node; the operator pins pods to it.
const nodeName = "proxy-operator-local"

// The agent's address pool: disjoint from the other test packages' agents,
// and large enough for a fleet of 100 plus replacements.
var (
	poolFirst = netip.MustParseAddr("127.0.6.2")
	poolLast  = netip.MustParseAddr("127.0.6.254")
)

// shared is the environment of every test in the package; set by TestMain.
var shared *environment

// environment is one control plane, node agent, operator and target server;
// the package's framework.Env stops them.
// operatorNamespace is the operator's own (its proxy auth key's Secret).
const operatorNamespace = "default"

type environment struct {
	cp     *controlplane.ControlPlane
	client client.Client
	kube   kubernetes.Interface
	agent  *nodeagent.Agent
	// target is the local HTTP server requests are proxied to.
	target *httptest.Server
	// targetHits counts requests that reached target.
	targetHits *counter
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) inc() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func TestMain(m *testing.M) { os.Exit(framework.Main(m, "e2e", start)) }

// start brings up the package's control plane, a node agent running real
// squids, a target site and the operator in process, and waits until the
// operator reconciles.
func start(ctx context.Context, fw *framework.Env) error {
	env := &environment{targetHits: &counter{}}
	shared = env
	if _, err := nodeagent.LookSquid(""); err != nil {
		return fmt.Errorf("%w (the e2e tests run real squid)", err)
	}
	var err error
	if env.cp, err = fw.ControlPlane(ctx, controlplane.Options{CRDFS: crds.FS}); err != nil {
		return err
	}
	scheme, err := app.NewScheme()
	if err != nil {
		return err
	}
	if env.client, err = framework.Client(env.cp, scheme); err != nil {
		return err
	}
	if env.kube, err = kubernetes.NewForConfig(env.cp.RESTConfig()); err != nil {
		return err
	}

	env.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env.targetHits.inc()
		fmt.Fprintf(w, "e2e target; via=%s", r.Header.Get("Via"))
	}))
	fw.Defer("target", func() error { env.target.Close(); return nil })

	agentLog, err := fw.Logger("nodeagent.log")
	if err != nil {
		return err
	}
	env.agent, err = nodeagent.New(env.cp.RESTConfig(), nodeagent.Options{
		NodeName:  nodeName,
		Log:       agentLog,
		PoolFirst: poolFirst,
		PoolLast:  poolLast,
		Workers:   32,
	})
	if err != nil {
		return err
	}
	// Stopping the agent stops every squid it started.
	if err := fw.Go(ctx, "node agent", env.agent.Run, env.agent.Ready()); err != nil {
		return err
	}

	opLog, err := fw.Logger("operator.log")
	if err != nil {
		return err
	}
	// controller-runtime warns loudly unless its global logger is set.
	ctrl.SetLogger(opLog)
	opts := operatorOptions()
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("operator options: %w", err)
	}
	if err := fw.Go(log.IntoContext(ctx, opLog), "operator", func(ctx context.Context) error {
		return app.Run(ctx, env.cp.RESTConfig(), opts)
	}, nil); err != nil {
		return err
	}
	if err := ensureNamespace(ctx, env.client, testNamespace); err != nil {
		return err
	}
	return waitOperatorWorking(ctx, env.client)
}

// waitOperatorWorking returns once the operator reconciles: an External
// Proxy (no provider involved) turns Provisioned. Tests then time the
// operator's work, not its start-up.
func waitOperatorWorking(ctx context.Context, c client.Client) error {
	p := builders.Proxy(testNamespace, "warm-up").External("127.0.0.1", 3128).Obj()
	if err := c.Create(ctx, p); err != nil {
		return fmt.Errorf("creating the warm-up Proxy: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned), nil
	})
	if err != nil {
		return fmt.Errorf("the operator did not reconcile an External Proxy: %w (status %+v)", err, p.Status)
	}
	// External Proxies carry no finalizer: deletion is immediate.
	if err := c.Delete(ctx, p); err != nil {
		return fmt.Errorf("deleting the warm-up Proxy: %w", err)
	}
	return nil
}

// operatorOptions are the production defaults with the polls shrunk, the
// servers off (no fixed ports) and pods pinned to the agent's node.
func operatorOptions() *app.Options {
	opts := app.NewOptions()
	// Its proxy auth key Secret goes there; the proxies check credentials.
	opts.Namespace = operatorNamespace
	opts.MetricsAddr = "0"
	opts.HealthProbeAddr = "0"
	// The lease APIs have their own e2e packages; off here so nothing binds
	// a fixed port (:8090, :7443) that another process may hold.
	opts.Discovery.Addr = "0"
	opts.APIServer.SecureServing.BindPort = 0
	opts.Kubernetes.NodeName = nodeName
	framework.AllowLocalOrigins(&opts.ProxyAuth)
	opts.Intervals.ProvisioningPoll = 250 * time.Millisecond
	opts.Intervals.DeletionPoll = 250 * time.Millisecond
	opts.Intervals.RequeueNow = 50 * time.Millisecond
	opts.Intervals.DriftPoll = 5 * time.Second
	opts.Health.Tick = 100 * time.Millisecond
	return opts
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}
