package app

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol/flowcontrolmetrics"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// queueShutdownTimeout bounds waiting for evicted waiters to return at stop.
const queueShutdownTimeout = 10 * time.Second

// leaseOutcomes are the outcomes of POST /v1/leases: Run passes them to
// metrics.New (metrics.Options.LeaseOutcomes) so that every
// lease_requests_total{outcome} series exists from the start.
func leaseOutcomes() []string {
	return []string{discovery.OutcomeGranted, discovery.OutcomeNoMatch, discovery.OutcomeBadRequest,
		discovery.OutcomeRejected, discovery.OutcomeCancelled, discovery.OutcomeError}
}

// setupLeasing builds the lease store and everything that serves it, and
// adds them to mgr, none of them leader-elected (lease state lives in this
// process, so every replica serves its own):
//
//   - the store, fed by the manager's Proxy informer (lease.ProxySync), its
//     sweep a Runnable;
//   - the wait queue (pkg/flowcontrol) in front of the store for requests
//     with waitSeconds > 0, woken by the store's capacity hook;
//   - the HTTP discovery API (unless --discovery-bind-address=0), counting
//     its POST /v1/leases outcomes on leaseMetrics (Run passes its
//     *metrics.Metrics, which registered lease_requests_total);
//   - the aggregated ProxyLease API server (unless --apiserver-secure-port=0).
//
// Requests without a wait go to the store directly: they may take capacity a
// waiter is owed in the instant between a release and the queue's round,
// which costs fairness only for that instant.
//
// reg receives the collectors that need the store or the queue built here
// (proxy_operator_leases_active and the flow-control metrics).
func setupLeasing(ctx context.Context, mgr manager.Manager, cfg *rest.Config, o *Options, reg prometheus.Registerer, leaseMetrics discovery.LeaseMetrics) error {
	logger := log.FromContext(ctx)
	tokens, err := o.Leasing.DiscoveryTokens(os.Getenv)
	if err != nil {
		return err
	}
	clk := clock.RealClock{}
	store, err := lease.New(o.Leasing.storeOptions(), clk)
	if err != nil {
		return fmt.Errorf("creating lease store: %w", err)
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &crawlv1alpha1.Proxy{})
	if err != nil {
		return fmt.Errorf("getting the Proxy informer for the lease store: %w", err)
	}
	if _, err := inf.AddEventHandler(lease.NewProxySync(store)); err != nil {
		return fmt.Errorf("feeding the lease store from the Proxy informer: %w", err)
	}
	if err := mgr.Add(store); err != nil {
		return fmt.Errorf("adding lease sweep: %w", err)
	}

	queueMetrics := flowcontrolmetrics.New()
	for _, c := range []prometheus.Collector{lease.NewActiveLeasesCollector(store), queueMetrics} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering lease metrics: %w", err)
		}
	}

	ctl := NewLeaseController(store, clk, flowcontrol.Options{
		MaxQueuedPerFlow: o.Leasing.QueueMaxPerFlow,
		MaxQueuedPerBand: o.Leasing.QueueMaxPerBand,
		MaxQueued:        o.Leasing.QueueMax,
		RetryAfter:       o.Leasing.QueueRetryAfter,
		Metrics:          queueMetrics,
	})
	queue := &leaseQueueRunnable{ctl: ctl, stopHook: store.OnCapacity(ctl.OnCapacity)}
	if err := mgr.Add(queue); err != nil {
		queue.stopHook()
		return fmt.Errorf("adding lease wait queue: %w", err)
	}
	waiter := NewLeaseWaiter(ctl, store)

	if o.Leasing.DiscoveryAddr != "0" {
		if len(tokens) > 0 {
			// Identities, never tokens.
			logger.Info("discovery API accepts bearer tokens", "identities", tokenIdentities(tokens))
		}
		srv, err := newDiscoveryServer(&o.Leasing, tokens, store, waiter, leaseMetrics, clk)
		if err != nil {
			return err
		}
		if err := mgr.Add(srv); err != nil {
			return fmt.Errorf("adding discovery server: %w", err)
		}
	} else {
		logger.Info("HTTP discovery API disabled (--discovery-bind-address=0)")
	}

	if o.APIServer.Enabled() {
		// Delegated authn/authz read kube-system/extension-apiserver-authentication
		// here, so kube-apiserver must be reachable (as for the manager).
		srv, err := apiserver.New(o.APIServer, apiserver.Deps{Store: store, Waiter: waiter, RESTConfig: cfg, Clock: clk})
		if err != nil {
			return fmt.Errorf("creating aggregated API server: %w", err)
		}
		if err := mgr.Add(srv); err != nil {
			return fmt.Errorf("adding aggregated API server: %w", err)
		}
	} else {
		logger.Info("aggregated ProxyLease API server disabled (--" + apiserver.FlagPrefix + "secure-port=0)")
	}
	return nil
}

// newDiscoveryServer builds the HTTP discovery API as Run serves it: every
// configured token (LeasingOptions.DiscoveryTokens) authenticates as its
// identity, which becomes the holder and default flow of its leases. waiter
// and m may be nil.
func newDiscoveryServer(o *LeasingOptions, tokens map[string]string, store *lease.Store, waiter discovery.Waiter,
	m discovery.LeaseMetrics, clk clock.PassiveClock) (*discovery.Server, error) {
	srv, err := discovery.New(discovery.Options{
		Addr:    o.DiscoveryAddr,
		Tokens:  tokens,
		Leaser:  store,
		Lister:  store,
		Waiter:  waiter,
		Metrics: m,
		Clock:   clk,
		MaxWait: o.DiscoveryMaxWait,
	})
	if err != nil {
		return nil, fmt.Errorf("creating discovery server: %w", err)
	}
	return srv, nil
}

// tokenIdentities lists the identities of tokens, sorted, for the start-up log.
func tokenIdentities(tokens map[string]string) []string {
	ids := make([]string, 0, len(tokens))
	for _, id := range tokens {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// leaseQueueRunnable shuts the wait queue down when the manager stops:
// every waiter is evicted (answered 503) so the API servers' graceful
// shutdown does not wait out long waits.
type leaseQueueRunnable struct {
	ctl      *LeaseController
	stopHook func()
}

// Start waits for ctx to end, then unhooks the queue from the store and
// shuts it down.
func (r *leaseQueueRunnable) Start(ctx context.Context) error {
	<-ctx.Done()
	r.stopHook()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queueShutdownTimeout)
	defer cancel()
	if err := r.ctl.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down the lease wait queue: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica serves its own leases.
func (r *leaseQueueRunnable) NeedLeaderElection() bool { return false }
