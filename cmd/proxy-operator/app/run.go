package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	kubeclient "k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/gateway"
	"github.com/proxy-operator/proxy-operator/pkg/gc"
	"github.com/proxy-operator/proxy-operator/pkg/health"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
	"github.com/proxy-operator/proxy-operator/pkg/pool"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// The leader-election RBAC of this binary is declared in artifacts/rbac
// (markers.go): controller-gen cannot load this package, whose imports
// include generated code it excludes by build tag.

// EventReporter is the reporting controller of the operator's Events.
const EventReporter = "proxy-operator"

// OperatorContainer is the operator's container in its pod
// (artifacts/operator/operator.yaml).
const OperatorContainer = "operator"

// NewScheme returns the scheme of every type the operator reads or writes.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding client-go types: %w", err)
	}
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding %s types: %w", crawlv1alpha1.GroupName, err)
	}
	return s, nil
}

// Run builds the operator on cfg and runs it until ctx ends. Our metrics
// join controller-runtime's registry, which the manager serves on /metrics,
// registered here (metrics.New), never in an init().
func Run(ctx context.Context, cfg *rest.Config, o *Options) error {
	o.Complete()
	logger := log.FromContext(ctx)
	scheme, err := NewScheme()
	if err != nil {
		return err
	}
	// In a pod: the Lease taken only while the pod is Ready (else nil: the
	// manager makes its own).
	lock, err := o.Election.Lock(cfg, os.Getenv(kubernetes.PodNameEnv), o.Namespace)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                              scheme,
		Metrics:                             metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:              o.HealthProbeAddr,
		PprofBindAddress:                    o.PprofAddr,
		LeaderElection:                      o.Election.Enabled,
		LeaderElectionID:                    o.Election.ID,
		LeaderElectionNamespace:             o.Election.Namespace,
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &o.Election.LeaseDuration,
		RenewDeadline:                       &o.Election.RenewDeadline,
		RetryPeriod:                         &o.Election.RetryPeriod,
		// Release the Lease on shutdown so a rolling update does not wait
		// out the lease duration; safe because nothing runs after Start returns.
		LeaderElectionReleaseOnCancel: true,
		// The lease servers stop once the pod has left their Services, then
		// the last lease checkpoint is written, retried through a
		// kube-apiserver outage: the manager must not give up on it first
		// (its default is 30 s).
		GracefulShutdownTimeout: ptr.To(o.Serving.StepOutWorstCase() + checkpoint.FinalWriteWorstCase + 5*time.Second),
		Cache:                   controller.CacheOptions(o.WatchNamespaces),
		Controller:              config.Controller{ReconciliationTimeout: o.ReconcileTimeout},
		Logger:                  logger,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}

	// serves is set by setupLeasing below, before the manager starts (and
	// with it the first scrape).
	var serves func() bool
	m, err := metrics.New(ctrlmetrics.Registry, mgr.GetCache(), metrics.Options{Serving: func() bool { return serves == nil || serves() },
		LeaseAPIs: leasing.APIs(), LeaseOutcomes: leasing.Outcomes(), GCResults: gc.Results(), GCProviders: o.Providers,
		CheckpointResults: checkpoint.Results(), GatewayKinds: gateway.Kinds(), GatewayOutcomes: gateway.Outcomes()})
	if err != nil {
		return err
	}

	// The kubernetes provider reads pods straight from the API server: a
	// cached client would start a cluster-wide pod informer for a few polls.
	direct, err := client.New(cfg, client.Options{Scheme: scheme, HTTPClient: mgr.GetHTTPClient(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("creating direct client: %w", err)
	}
	tag, err := gc.InstallationTag(ctx, direct, o.InstanceTag, o.Namespace)
	if err != nil {
		return err
	}
	logger.Info("instances of this installation", "instanceTag", tag)
	constructors := map[string]provider.Constructor{
		kubernetes.Name: func(ctx context.Context) (provider.Provider, error) {
			egress, err := o.ProxyAuth.Egress()
			if err != nil {
				return nil, err
			}
			return kubernetes.NewInOperator(ctx, direct, o.Kubernetes, o.Namespace, os.Getenv(kubernetes.PodNameEnv), OperatorContainer, egress)
		},
		gcp.Name: func(ctx context.Context) (provider.Provider, error) {
			return gcp.New(ctx, o.GCP)
		},
	}
	providers, err := provider.NewRegistry(ctx, o.Providers, constructors, provider.MetricsWrapper(m))
	if err != nil {
		return fmt.Errorf("building providers: %w", err)
	}

	// Uncached: the operator must not cache every Secret of the cluster.
	kube, err := kubeclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building a Kubernetes client: %w", err)
	}
	keyring, instances, err := proxyAuth(ctx, kube, o)
	if err != nil {
		return err
	}

	// The orphan collector is leader-elected: it deletes.
	sweeper, err := gc.New(gc.Config{Options: o.GC, Reader: mgr.GetCache(), Providers: providers, Tag: tag,
		Namespaces: o.WatchNamespaces, Clock: clock.RealClock{}, Recorder: m})
	if err != nil {
		return err
	}
	if err := mgr.Add(sweeper); err != nil {
		return fmt.Errorf("adding orphan collector: %w", err)
	}

	// The health engine is leader-elected like the reconciler; it owns
	// health state and hands verdicts to the reconciler, the single writer
	// of status, over its event channel and snapshots.
	hopts := health.Options{Clock: clock.RealClock{}, Reader: mgr.GetCache(), Metrics: m}
	o.Health.Apply(&hopts)
	if keyring != nil {
		hopts.Auth = keyring
	}
	// Probes and the gateway never reach the API server on a Proxy
	// author's behalf: one dial policy for both.
	if err := hopts.Denied.AddServer(ctx, cfg.Host); err != nil {
		return fmt.Errorf("denying the API server to health probes and the gateway: %w", err)
	}
	engine, err := health.New(hopts)
	if err != nil {
		return fmt.Errorf("creating health engine: %w", err)
	}
	if err := mgr.Add(engine); err != nil {
		return fmt.Errorf("adding health engine: %w", err)
	}

	leases, takeover, err := setupLeasing(ctx, mgr, cfg, kube, o, ctrlmetrics.Registry, m, keyring, instances, hopts.Denied)
	if err != nil {
		return err
	}
	serves = leases.Gate.IsOpen

	r := &controller.ProxyReconciler{Client: mgr.GetClient(), Providers: providers, Recorder: mgr.GetEventRecorder(EventReporter),
		Health: engine, HealthEvents: engine.Events(), Intervals: o.Intervals, Clock: clock.RealClock{}, Tag: tag}
	if instances != nil {
		r.ProxyAuth = instances
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up proxy reconciler: %w", err)
	}
	pools := &pool.Reconciler{Client: mgr.GetClient(), Demand: leases, Clock: clock.RealClock{}, Options: o.Pool,
		Recorder: mgr.GetEventRecorder(EventReporter)}
	if err := pools.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up proxy pool reconciler: %w", err)
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding healthz check: %w", err)
	}
	if err := mgr.AddReadyzCheck("informers", controller.CacheSynced(mgr.GetCache())); err != nil {
		return fmt.Errorf("adding readyz check: %w", err)
	}
	logger.Info("starting manager", "providers", providers.Names(), "leaderElection", o.Election.Enabled)
	err = mgr.Start(ctx)
	// The manager does not wait for its runnables when the leadership is
	// lost: wait here for the last lease checkpoint (retried while
	// kube-apiserver is unreachable, so nothing this replica granted is lost).
	wctx, cancel := context.WithTimeout(context.Background(), lastCheckpointWait)
	takeover.Wait(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// lastCheckpointWait bounds how long Run waits for the last lease
// checkpoint after the manager stopped (pkg/checkpoint retries it for 2
// minutes).
const lastCheckpointWait = 150 * time.Second

// proxyAuth loads the proxy auth key (creating its Secret on first start)
// and builds the keyring and the instances' configurations; both nil when
// proxy auth is off.
func proxyAuth(ctx context.Context, kube kubeclient.Interface, o *Options) (*proxyauth.Keyring, *proxyauth.Instances, error) {
	po := o.ProxyAuth
	if !po.Enabled() {
		log.FromContext(ctx).Info("WARNING: proxy auth is off (--proxy-auth-secret is empty): the proxies serve anyone who reaches them, with or without a lease")
		return nil, nil, nil
	}
	key, err := leaseid.EnsureKeyFor(ctx, kube.CoreV1(), po.Namespace, po.SecretName, "proxy auth key", "every proxy is then replaced, as its key changes")
	if err != nil {
		return nil, nil, err
	}
	keyring, err := proxyauth.NewKeyring(key, clock.RealClock{})
	if err != nil {
		return nil, nil, err
	}
	instances, err := po.Instances(keyring)
	if err != nil {
		return nil, nil, err
	}
	if po.OperatorURL == "" {
		log.FromContext(ctx).Info("WARNING: --proxy-auth-operator-url is empty: a released lease's proxy credentials work until the lease's expiry")
	}
	log.FromContext(ctx).Info("proxies check lease credentials", "keyFingerprint", keyring.Fingerprint(), "operatorURL", po.OperatorURL)
	return keyring, instances, nil
}
