package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
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

// environment is one control plane, node agent, operator and target server.
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
	logDir     string

	stopOperator, stopAgent func() error
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

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	env, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: starting the environment: %v\n", err)
		if env != nil {
			_ = env.stop()
			env.dumpLogs()
		}
		return 1
	}
	shared = env
	code := m.Run()
	if err := env.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stopping the environment: %v\n", err)
		code = 1
	}
	// No processes left behind: every squid was the agent's child.
	if left := framework.SquidChildren(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: squid processes left behind: %v\n", left)
		code = 1
	}
	if code != 0 {
		env.dumpLogs()
	}
	if os.Getenv("E2E_KEEP_LOGS") == "" {
		_ = os.RemoveAll(env.logDir)
	} else {
		fmt.Fprintf(os.Stderr, "e2e: logs kept in %s\n", env.logDir)
	}
	return code
}

func start() (_ *environment, retErr error) {
	logDir, err := os.MkdirTemp("", "proxy-operator-e2e-")
	if err != nil {
		return nil, err
	}
	env := &environment{logDir: logDir, targetHits: &counter{}}
	defer func() {
		if retErr != nil {
			_ = env.stop()
		}
	}()
	if _, err := nodeagent.LookSquid(""); err != nil {
		return env, fmt.Errorf("%w (the e2e tests run real squid)", err)
	}

	ctx := context.Background()
	env.cp, err = controlplane.Start(ctx, controlplane.Options{CRDFS: crds.FS})
	if err != nil {
		return env, err
	}
	scheme, err := app.NewScheme()
	if err != nil {
		return env, err
	}
	env.client, err = client.New(env.cp.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		return env, err
	}
	if env.kube, err = kubernetes.NewForConfig(env.cp.RESTConfig()); err != nil {
		return env, err
	}

	env.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env.targetHits.inc()
		fmt.Fprintf(w, "e2e target; via=%s", r.Header.Get("Via"))
	}))

	agentLog, err := framework.FileLogger(filepath.Join(logDir, "nodeagent.log"))
	if err != nil {
		return env, err
	}
	env.agent, err = nodeagent.New(env.cp.RESTConfig(), nodeagent.Options{
		NodeName:  nodeName,
		Log:       agentLog,
		PoolFirst: poolFirst,
		PoolLast:  poolLast,
		Workers:   32,
	})
	if err != nil {
		return env, err
	}
	env.stopAgent, err = framework.RunUntilStopped(ctx, env.agent.Run, env.agent.Ready())
	if err != nil {
		return env, fmt.Errorf("node agent: %w", err)
	}

	opLog, err := framework.FileLogger(filepath.Join(logDir, "operator.log"))
	if err != nil {
		return env, err
	}
	// controller-runtime warns loudly unless its global logger is set.
	ctrl.SetLogger(opLog)
	opts := operatorOptions()
	if err := opts.Validate(); err != nil {
		return env, fmt.Errorf("operator options: %w", err)
	}
	opCtx := log.IntoContext(ctx, opLog)
	env.stopOperator, err = framework.RunUntilStopped(opCtx, func(ctx context.Context) error {
		return app.Run(ctx, env.cp.RESTConfig(), opts)
	}, nil)
	if err != nil {
		return env, fmt.Errorf("operator: %w", err)
	}
	if err := ensureNamespace(ctx, env.client, testNamespace); err != nil {
		return env, err
	}
	if err := waitOperatorWorking(ctx, env.client); err != nil {
		return env, err
	}
	return env, nil
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

// stop tears down in reverse order: operator, agent (stops every squid),
// target, control plane.
func (e *environment) stop() error {
	var errs []error
	if e.stopOperator != nil {
		if err := e.stopOperator(); err != nil {
			errs = append(errs, fmt.Errorf("operator: %w", err))
		}
	}
	if e.stopAgent != nil {
		if err := e.stopAgent(); err != nil {
			errs = append(errs, fmt.Errorf("node agent: %w", err))
		}
	}
	if e.target != nil {
		e.target.Close()
	}
	if e.cp != nil {
		if err := e.cp.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("control plane: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (e *environment) dumpLogs() {
	framework.DumpLogTails(os.Stderr, e.logDir, 80, "operator.log", "nodeagent.log")
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}
