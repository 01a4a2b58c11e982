package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/gateway"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
	kubeprovider "github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
	"github.com/proxy-operator/proxy-operator/pkg/serving"
)

// setupLeasing builds the lease store and the wait queue (pkg/leasing) and
// everything that serves them, and adds them to mgr: the store fed by the
// manager's Proxy informer, the HTTP discovery API (unless
// --discovery-bind-address=0) and the aggregated ProxyLease API server
// (unless --apiserver-secure-port=0), each through its leasing.Service,
// which counts its requests on leaseMetrics. The servers run on every
// replica, but their Gate opens only on the one that leads (every replica
// without --leader-elect), once it has loaded the lease checkpoint
// (leasing.Takeover, which then writes the checkpoint); a standby answers
// 503 naming the leader and is not ready. reg receives the store's and the
// queue's collectors.
func setupLeasing(ctx context.Context, mgr manager.Manager, cfg *rest.Config, o *Options, reg prometheus.Registerer, leaseMetrics *metrics.Metrics, keyring *proxyauth.Keyring, instances *proxyauth.Instances, denied dialpolicy.Denylist) (*leasing.Leasing, *leasing.Takeover, error) {
	logger := log.FromContext(ctx)
	// Uncached: the operator must not cache every Secret of the cluster.
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building a Kubernetes client: %w", err)
	}
	var tokens discovery.Tokens
	var tokenSecret *discovery.TokenSecret
	if o.Discovery.Enabled() {
		if tokens, tokenSecret, err = o.Discovery.LoadTokens(ctx, os.Getenv, kube.CoreV1(), o.Namespace); err != nil {
			return nil, nil, err
		}
	}
	clk := clock.RealClock{}
	storeOpts := o.Leasing.StoreOptions()
	var signer *leaseid.Signer
	if o.LeaseIDs.Enabled() {
		signer = leaseid.NewSigner()
		storeOpts.IDs = signer
	}
	store, err := lease.New(storeOpts, clk)
	if err != nil {
		return nil, nil, fmt.Errorf("creating lease store: %w", err)
	}
	l := leasing.NewWithStore(store, o.Leasing, clk)
	if signer != nil {
		l.IDs = signer
	}
	if keyring != nil {
		l.Auth = keyring
	}
	// Only the replica that leads serves leases, once it has loaded them.
	var leader func(context.Context) string
	if o.LeaderElection {
		ns := o.LeaderElectionNamespace
		if ns == "" {
			ns = o.Namespace
		}
		leader = leasing.LeaseHolder(kube.CoordinationV1(), ns, o.LeaderElectionID, clk)
	}
	l.Gate = leasing.NewGate(leader)
	// In a pod, the lease path (the store's timer, the queue, the servers,
	// the gateway) stops at shutdown only once the pod has left the lease
	// APIs' Services (pkg/serving): it still answers what is sent there.
	labeller, err := servingLabeller(ctx, kube, o, l.Gate.IsOpen)
	if err != nil {
		return nil, nil, err
	}
	addServing := func(r manager.Runnable) error {
		if labeller != nil {
			return mgr.Add(labeller.Hold(r))
		}
		return mgr.Add(r)
	}
	var cp *checkpoint.Checkpointer
	if o.Checkpoint.Enabled() {
		if cp, err = checkpoint.New(o.checkpointOptions(), checkpoint.Deps{Secrets: kube.CoreV1(), Store: l.Store, Codec: proxylease.MetadataCodec{}, Recorder: leaseMetrics}); err != nil {
			return nil, nil, err
		}
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &crawlv1alpha1.Proxy{})
	if err != nil {
		return nil, nil, fmt.Errorf("getting the Proxy informer for the lease store: %w", err)
	}
	if _, err := inf.AddEventHandler(lease.NewProxySync(l.Store)); err != nil {
		return nil, nil, fmt.Errorf("feeding the lease store from the Proxy informer: %w", err)
	}
	for _, r := range l.Runnables() {
		if err := addServing(r); err != nil {
			return nil, nil, fmt.Errorf("adding the lease store and queue: %w", err)
		}
	}
	for _, c := range l.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, nil, fmt.Errorf("registering lease metrics: %w", err)
		}
	}

	servingCert, err := setupServingCert(ctx, mgr, cfg, kube, o)
	if err != nil {
		return nil, nil, err
	}
	if instances != nil && servingCert != nil {
		// Proxies poll the discovery API, which serves this certificate.
		instances.DefaultCA(servingCert.CABundle)
	}

	// The gateway on the replica that serves leases calls the lease API in
	// this process (nil: no API here).
	var localAPI *gateway.LocalAPI
	if o.Discovery.Enabled() {
		if len(tokens) > 0 {
			logger.Info("discovery API accepts bearer tokens", "identities", discovery.Identities(tokens))
		}
		svc, err := l.Service(leasing.APIHTTP, o.Discovery.MaxWait, leaseMetrics)
		if err != nil {
			return nil, nil, err
		}
		srv, err := newDiscoveryServer(&o.Discovery, tokens, svc, servingCert, kube)
		if err != nil {
			return nil, nil, err
		}
		if err := addServing(srv); err != nil {
			return nil, nil, fmt.Errorf("adding discovery server: %w", err)
		}
		localAPI = &gateway.LocalAPI{Leaser: srv.InProcess(), Serving: l.Gate.IsOpen}
		if cp != nil {
			cp.FinalAfter(srv.Stopped())
		}
		if tokenSecret != nil {
			if err := mgr.Add(tokenSecret.Follow(srv)); err != nil {
				return nil, nil, fmt.Errorf("adding the discovery token follower: %w", err)
			}
		}
	} else {
		logger.Info("HTTP discovery API disabled (--discovery-bind-address=0)")
	}

	if err := setupGateway(addServing, &o.Gateway, servingCert, leaseMetrics, localAPI, denied); err != nil {
		return nil, nil, err
	}

	var apiServer *apiserver.Server
	if o.APIServer.Enabled() {
		// Delegated authn/authz read kube-system/extension-apiserver-authentication
		// here, so kube-apiserver must be reachable (as for the manager).
		svc, err := l.Service(leasing.APIKubernetes, o.APIServer.MaxWait, leaseMetrics)
		if err != nil {
			return nil, nil, err
		}
		deps := apiserver.Deps{Service: svc, RESTConfig: cfg, Clock: clk}
		if servingCert != nil {
			deps.ServingCert = servingCert
		}
		srv, err := apiserver.New(o.APIServer, deps)
		if err != nil {
			return nil, nil, fmt.Errorf("creating aggregated API server: %w", err)
		}
		if err := addServing(srv); err != nil {
			return nil, nil, fmt.Errorf("adding aggregated API server: %w", err)
		}
		// Not Ready until it can authenticate kube-apiserver's requests.
		if err := mgr.AddReadyzCheck("apiserver", srv.Ready); err != nil {
			return nil, nil, fmt.Errorf("adding the apiserver readyz check: %w", err)
		}
		if cp != nil {
			cp.FinalAfter(srv.Stopped())
		}
		apiServer = srv
	} else {
		logger.Info("aggregated ProxyLease API server disabled (--" + apiserver.FlagPrefix + "secure-port=0)")
	}

	// Once this replica stops serving, the store takes no more changes: the
	// last checkpoint holds them all.
	takeover := &leasing.Takeover{Gate: l.Gate, Stop: l.Store.Freeze}
	var steps []func(context.Context) error
	if signer != nil {
		steps = append(steps, func(ctx context.Context) error { return signer.LoadKey(ctx, kube.CoreV1(), o.leaseIDOptions()) })
	}
	if cp != nil {
		var restored func(uint64)
		if apiServer != nil {
			restored = apiServer.Restored
		}
		steps = append(steps, func(ctx context.Context) error { return cp.TakeOver(ctx, mgr.GetCache().WaitForCacheSync, restored) })
		takeover.Run = cp.Start
	}
	takeover.Prepare = leasing.Steps(steps...)
	if err := mgr.Add(takeover); err != nil {
		return nil, nil, fmt.Errorf("adding the lease takeover: %w", err)
	}
	// /readyz/leases says whether this replica serves leases (the pod's
	// readinessProbe excludes it: both replicas are Ready; the lease APIs'
	// Services select the serving pod by its label, below).
	if err := mgr.AddReadyzCheck("leases", func(*http.Request) error {
		if !l.Gate.IsOpen() {
			return errors.New("not serving leases: a standby, or loading the lease checkpoint")
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("adding the leases readyz check: %w", err)
	}
	if labeller != nil {
		if err := mgr.Add(labeller); err != nil {
			return nil, nil, fmt.Errorf("adding the serving labeller: %w", err)
		}
	}
	return l, takeover, nil
}

// servingLabeller builds the labeller of the pod that serves leases when
// this replica runs in a pod ($POD_NAME, --namespace); elsewhere nil: there
// is no pod to label (the dev environment routes by /readyz, whose leases
// check only the serving replica passes).
func servingLabeller(ctx context.Context, kube kubernetes.Interface, o *Options, isServing func() bool) (*serving.Labeller, error) {
	so := o.Serving
	so.Namespace, so.PodName = o.Namespace, os.Getenv(kubeprovider.PodNameEnv)
	if so.PodName == "" || so.Namespace == "" {
		log.FromContext(ctx).Info("not labelling the serving pod (needs --namespace and $" + kubeprovider.PodNameEnv + ")")
		return nil, nil
	}
	return serving.New(so, kube, isServing, clock.RealClock{})
}

// leaderLock is the leader-election lock of a replica in a pod
// (--leader-elect, $POD_NAME, --namespace): controller-runtime's Lease, taken
// only while the pod is Ready (serving.ReadyLock). Elsewhere nil: the
// manager makes its own.
func leaderLock(cfg *rest.Config, o *Options) (resourcelock.Interface, error) {
	podName := os.Getenv(kubeprovider.PodNameEnv)
	if !o.LeaderElection || podName == "" || o.Namespace == "" {
		return nil, nil
	}
	ns := o.LeaderElectionNamespace
	if ns == "" {
		ns = o.Namespace
	}
	return serving.NewLock(cfg, serving.LockOptions{Namespace: ns, Name: o.LeaderElectionID,
		PodName: podName, PodNamespace: o.Namespace, RenewDeadline: o.RenewDeadline})
}

// setupGateway adds the forward-proxy gateway when --gateway-bind-address is
// set: every replica serves it, leasing through --gateway-lease-api-url, or
// through local (nil: none) while this replica serves leases. It dials no
// leased proxy that denied (the probes' dial policy) refuses.
func setupGateway(add func(manager.Runnable) error, o *gateway.Options, servingCert *certs.Manager, rec gateway.Recorder, local *gateway.LocalAPI, denied dialpolicy.Denylist) error {
	if !o.Enabled() {
		return nil
	}
	var ca []byte
	if servingCert != nil {
		ca = servingCert.CABundle()
	}
	leaser, err := o.Leaser(ca, local)
	if err != nil {
		return err
	}
	g, err := gateway.New(*o, gateway.Deps{Leaser: leaser, Recorder: rec, Denied: denied})
	if err != nil {
		return err
	}
	if err := add(g); err != nil {
		return fmt.Errorf("adding the gateway: %w", err)
	}
	return nil
}

// setupServingCert builds the operator's certificate manager when
// --serving-cert-secret is set (nil otherwise), brings its Secret up to date
// before any server starts, and adds it to mgr to keep it current.
func setupServingCert(ctx context.Context, mgr manager.Manager, cfg *rest.Config, kube kubernetes.Interface, o *Options) (*certs.Manager, error) {
	if !o.Certs.Enabled() {
		return nil, nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("serving certificate client: %w", err)
	}
	m, err := certs.NewManager(o.certsOptions(), certs.Deps{Kube: kube, Dynamic: dyn})
	if err != nil {
		return nil, err
	}
	if err := m.Ensure(ctx); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if err := mgr.Add(m); err != nil {
		return nil, fmt.Errorf("adding the serving certificate manager: %w", err)
	}
	return m, nil
}

// newDiscoveryServer builds the HTTP discovery API as Run serves it: every
// configured token authenticates as its identity, which becomes the holder
// and default flow of its leases; it serves TLS with its own files, else the
// managed certificate (nil: none), else plain HTTP when asked for; with
// kube, pods' ServiceAccount tokens too (--discovery-kubernetes-tokens).
func newDiscoveryServer(o *discovery.ServingOptions, tokens discovery.Tokens, svc *leasing.Service, managed *certs.Manager, kube kubernetes.Interface) (*discovery.Server, error) {
	var m dynamiccertificates.CertKeyContentProvider
	if managed != nil {
		m = managed
	}
	cert, err := o.ServingCert(m)
	if err != nil {
		return nil, err
	}
	opts := discovery.Options{Addr: o.Addr, Tokens: tokens, Service: svc, Cert: cert}
	if a := o.Authenticator(kube); a != nil {
		opts.Kubernetes = a
	}
	srv, err := discovery.New(opts)
	if err != nil {
		return nil, fmt.Errorf("creating discovery server: %w", err)
	}
	return srv, nil
}
