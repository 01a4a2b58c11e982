package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// Metric names.
const (
	ProxiesName = "proxy_operator_proxies"
	// PoolReplicasName, PoolDesiredName and PoolWaitingName describe each
	// ProxyPool from its status in the cache at scrape time.
	PoolReplicasName     = "proxy_operator_pool_replicas"
	PoolDesiredName      = "proxy_operator_pool_desired_replicas"
	PoolWaitingName      = "proxy_operator_pool_waiting_requests"
	ProviderRequestsName = "proxy_operator_provider_requests_total"
	// HealthcheckDurationName (one histogram for the fleet),
	// HealthcheckLatencyName and HealthcheckFailuresName (per proxy) are fed
	// by the health engine on every probe (ObserveProbe); the per-proxy
	// series are deleted when it prunes its state (Forget). A histogram per
	// proxy would cost a dozen series per proxy.
	HealthcheckDurationName = "proxy_operator_healthcheck_duration_seconds"
	HealthcheckLatencyName  = "proxy_operator_healthcheck_latency_seconds"
	HealthcheckFailuresName = "proxy_operator_healthcheck_failures_total"
	// LeaseRequestsName is fed by the lease path (pkg/leasing's doors): one
	// count per lease request of either API, by api and outcome
	// (LeaseRequest).
	LeaseRequestsName = "proxy_operator_lease_requests_total"
	// GCDeletedName, GCSweepsName and GCLastCompleteSweepName are fed by
	// the orphan collector (GCDeleted, GCSweep).
	GCDeletedName           = "proxy_operator_gc_deleted_total"
	GCSweepsName            = "proxy_operator_gc_sweeps_total"
	GCLastCompleteSweepName = "proxy_operator_gc_last_complete_sweep_timestamp_seconds"
	// CheckpointWritesName and CheckpointLastCurrentName are fed by the
	// lease checkpoint writer on the leader (LeaseCheckpointWrite,
	// LeaseCheckpointCurrent).
	CheckpointWritesName      = "proxy_operator_lease_checkpoint_writes_total"
	CheckpointLastCurrentName = "proxy_operator_lease_checkpoint_last_success_timestamp_seconds"
	// GatewayRequestsName, GatewayBytesName and GatewayTunnelsName are fed
	// by the forward-proxy gateway (GatewayRequest, GatewayBytes,
	// GatewayTunnels).
	GatewayRequestsName = "proxy_operator_gateway_requests_total"
	GatewayBytesName    = "proxy_operator_gateway_bytes_total"
	GatewayTunnelsName  = "proxy_operator_gateway_tunnels"
)

// DefaultScrapeTimeout bounds the cache List of one scrape.
const DefaultScrapeTimeout = 5 * time.Second

// Options tune New. The zero value is valid.
type Options struct {
	// ScrapeTimeout bounds listing Proxies during a scrape
	// (default DefaultScrapeTimeout).
	ScrapeTimeout time.Duration
	// LeaseAPIs and LeaseOutcomes are the api and outcome values of
	// proxy_operator_lease_requests_total exported at 0 from the start (every pair), so
	// that a rate over an outcome that has not happened yet reads 0 instead
	// of nothing. The caller passes leasing.APIs() and leasing.Outcomes():
	// this package must not import pkg/leasing. A value not listed still
	// gets its series at its first count.
	LeaseAPIs     []string
	LeaseOutcomes []string
	// GCResults are the results of proxy_operator_gc_sweeps_total and
	// GCProviders the providers of proxy_operator_gc_deleted_total, both
	// exported at 0 from the start (the caller passes gc.Results() and the
	// enabled providers: this package must not import pkg/gc).
	GCResults   []string
	GCProviders []string
	// CheckpointResults are the results of
	// proxy_operator_lease_checkpoint_writes_total exported at 0 from the
	// start (the caller passes checkpoint.Results()).
	CheckpointResults []string
	// GatewayKinds and GatewayOutcomes are the kind and outcome values of
	// proxy_operator_gateway_requests_total exported at 0 from the start
	// (the caller passes gateway.Kinds() and gateway.Outcomes()).
	GatewayKinds    []string
	GatewayOutcomes []string
	// Serving (nil: always) says whether this replica serves leases: the
	// Proxy and ProxyPool collectors export only where it does, so that a
	// standby, Ready and scraped too, does not count the fleet twice.
	Serving func() bool
}

// Metrics holds the operator's metrics. Its methods are safe for concurrent
// use and never block.
type Metrics struct {
	providerRequests *prometheus.CounterVec
	probeDuration    prometheus.Histogram
	probeLatency     *prometheus.GaugeVec
	probeFailures    *prometheus.CounterVec
	leaseRequests    *prometheus.CounterVec
	gcDeleted        *prometheus.CounterVec
	gcSweeps         *prometheus.CounterVec
	gcLastComplete   prometheus.Gauge
	cpWrites         *prometheus.CounterVec
	cpLastCurrent    prometheus.Gauge
	gwRequests       *prometheus.CounterVec
	gwBytes          *prometheus.CounterVec
	gwTunnels        prometheus.Gauge
}

// New creates the metrics and registers them on reg: the scrape-time
// proxy_operator_proxies{phase} collector, which lists Proxies from reader
// (the manager's cache) at every scrape, and the
// proxy_operator_provider_requests_total{provider,op,result}, the health probe vectors and
// proxy_operator_lease_requests_total{api,outcome} (every pair of opts.LeaseAPIs and
// opts.LeaseOutcomes at 0). A nil reader
// leaves the Proxy collector out.
func New(reg prometheus.Registerer, reader client.Reader, opts Options) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	if opts.ScrapeTimeout <= 0 {
		opts.ScrapeTimeout = DefaultScrapeTimeout
	}
	m := &Metrics{
		providerRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ProviderRequestsName,
			Help: "Provider API calls by provider, operation (create, get, delete, list) and result (success or the error class).",
		}, []string{"provider", "op", "result"}),
		probeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    HealthcheckDurationName,
			Help:    "Duration of the health probes sent through the fleet's proxies, failed ones included.",
			Buckets: prometheus.DefBuckets,
		}),
		probeLatency: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: HealthcheckLatencyName,
			Help: "Duration of the last health probe through each proxy (namespace/name), failed or not.",
		}, []string{"proxy"}),
		probeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: HealthcheckFailuresName,
			Help: "Failed health probes through each proxy (namespace/name).",
		}, []string{"proxy"}),
		leaseRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: LeaseRequestsName,
			Help: "Lease requests by API (http: POST /v1/leases, kubernetes: ProxyLease create) and outcome.",
		}, []string{"api", "outcome"}),
		gcDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: GCDeletedName,
			Help: "Orphaned instances the garbage collector deleted, by provider.",
		}, []string{"provider"}),
		gcSweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: GCSweepsName,
			Help: "Garbage-collection sweeps by result (complete, partial: some provider or zone unread or a delete failed, skipped: Proxies unreadable).",
		}, []string{"result"}),
		gcLastComplete: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: GCLastCompleteSweepName,
			Help: "Unix time of the last complete garbage-collection sweep (0: none yet).",
		}),
		cpWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: CheckpointWritesName,
			Help: "Lease checkpoint writes of this replica by result (written, failed: retried at the next interval, fenced: another replica took the leases over).",
		}, []string{"result"}),
		cpLastCurrent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: CheckpointLastCurrentName,
			Help: "Unix time at which the lease checkpoint last held the lease store's state (a write, or a check that nothing changed since); 0 on a replica that does not write it (a standby).",
		}),
		gwRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: GatewayRequestsName,
			Help: "Requests the gateway served, by kind (http: plain HTTP, connect: a tunnel) and outcome (ok, or the reason of the gateway's own answer).",
		}, []string{"kind", "outcome"}),
		gwBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: GatewayBytesName,
			Help: "Bytes the gateway relayed, by direction (up: client to site, down: site to client).",
		}, []string{"direction"}),
		gwTunnels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: GatewayTunnelsName,
			Help: "CONNECT tunnels open through the gateway.",
		}),
	}
	for _, k := range opts.GatewayKinds {
		for _, o := range opts.GatewayOutcomes {
			m.gwRequests.WithLabelValues(k, o)
		}
	}
	m.gwBytes.WithLabelValues("up")
	m.gwBytes.WithLabelValues("down")
	for _, r := range opts.CheckpointResults {
		m.cpWrites.WithLabelValues(r)
	}
	for _, a := range opts.LeaseAPIs {
		for _, o := range opts.LeaseOutcomes {
			m.leaseRequests.WithLabelValues(a, o)
		}
	}
	for _, r := range opts.GCResults {
		m.gcSweeps.WithLabelValues(r)
	}
	for _, p := range opts.GCProviders {
		m.gcDeleted.WithLabelValues(p)
	}
	cs := []prometheus.Collector{m.providerRequests, m.probeDuration, m.probeLatency, m.probeFailures, m.leaseRequests,
		m.gcDeleted, m.gcSweeps, m.gcLastComplete, m.cpWrites, m.cpLastCurrent, m.gwRequests, m.gwBytes, m.gwTunnels}
	if reader != nil {
		cs = append(cs, newProxyCollector(reader, opts.ScrapeTimeout, opts.Serving), newPoolCollector(reader, opts.ScrapeTimeout, opts.Serving))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, nil
}

// ProviderRequest counts one provider call; it satisfies
// provider.RequestRecorder.
func (m *Metrics) ProviderRequest(provider, op, result string) {
	m.providerRequests.WithLabelValues(provider, op, result).Inc()
}

// LeaseRequest counts one lease request of api; it satisfies
// leasing.Recorder.
func (m *Metrics) LeaseRequest(api, outcome string) {
	m.leaseRequests.WithLabelValues(api, outcome).Inc()
}

// GatewayRequest counts one request of the gateway; with GatewayBytes and
// GatewayTunnels it satisfies gateway.Recorder.
func (m *Metrics) GatewayRequest(kind, outcome string) {
	m.gwRequests.WithLabelValues(kind, outcome).Inc()
}

// GatewayBytes counts bytes relayed in direction.
func (m *Metrics) GatewayBytes(direction string, n int64) {
	if n > 0 {
		m.gwBytes.WithLabelValues(direction).Add(float64(n))
	}
}

// GatewayTunnels moves the open tunnels by delta.
func (m *Metrics) GatewayTunnels(delta int) { m.gwTunnels.Add(float64(delta)) }

// GCDeleted counts one orphan deleted; it satisfies gc.Recorder.
func (m *Metrics) GCDeleted(provider string) {
	m.gcDeleted.WithLabelValues(provider).Inc()
}

// GCSweep counts one sweep and, when it was complete, sets the time of the
// last complete sweep; it satisfies gc.Recorder.
func (m *Metrics) GCSweep(result string, at time.Time) {
	m.gcSweeps.WithLabelValues(result).Inc()
	if result == completeSweep {
		m.gcLastComplete.Set(float64(at.UnixNano()) / 1e9)
	}
}

// LeaseCheckpointWrite counts one lease checkpoint write; it satisfies
// checkpoint.Recorder.
func (m *Metrics) LeaseCheckpointWrite(result string) { m.cpWrites.WithLabelValues(result).Inc() }

// LeaseCheckpointCurrent sets when the lease checkpoint last held the
// store's state (zero: this replica no longer writes it); it satisfies
// checkpoint.Recorder.
func (m *Metrics) LeaseCheckpointCurrent(at time.Time) {
	if at.IsZero() {
		m.cpLastCurrent.Set(0)
		return
	}
	m.cpLastCurrent.Set(float64(at.UnixNano()) / 1e9)
}

// completeSweep is gc.ResultComplete, restated: this package must not import
// pkg/gc (a test pins the two together).
const completeSweep = "complete"

// ObserveProbe records one health probe of proxy; it satisfies
// health.ProbeMetrics. The failure counter is created at the first probe, so
// a proxy that never failed reads 0 rather than missing.
func (m *Metrics) ObserveProbe(proxy string, d time.Duration, ok bool) {
	m.probeDuration.Observe(d.Seconds())
	m.probeLatency.WithLabelValues(proxy).Set(d.Seconds())
	c := m.probeFailures.WithLabelValues(proxy)
	if !ok {
		c.Inc()
	}
}

// Forget deletes proxy's health series; it satisfies health.ProbeMetrics.
func (m *Metrics) Forget(proxy string) {
	m.probeLatency.DeleteLabelValues(proxy)
	m.probeFailures.DeleteLabelValues(proxy)
}

// proxyCollector counts Proxies by phase at scrape time. A gauge updated by
// the reconciler would drift (missed deletes) and leak series; listing the
// cache at scrape is exact and costs one in-memory List.
type proxyCollector struct {
	reader  client.Reader
	timeout time.Duration
	serving func() bool
	desc    *prometheus.Desc
}

func newProxyCollector(reader client.Reader, timeout time.Duration, serving func() bool) *proxyCollector {
	return &proxyCollector{
		reader:  reader,
		timeout: timeout,
		serving: serving,
		desc: prometheus.NewDesc(ProxiesName,
			"Proxies by status.phase, read from the operator's cache at scrape time (an unreconciled Proxy counts as Pending).",
			[]string{"phase"}, nil),
	}
}

// allPhases is every phase, always exported so that a phase dropping to zero
// reads 0 instead of vanishing.
func allPhases() []crawlv1alpha1.ProxyPhase {
	return []crawlv1alpha1.ProxyPhase{
		crawlv1alpha1.PhasePending,
		crawlv1alpha1.PhaseProvisioning,
		crawlv1alpha1.PhaseReady,
		crawlv1alpha1.PhaseUnhealthy,
		crawlv1alpha1.PhaseFailed,
		crawlv1alpha1.PhaseDeleting,
	}
}

func (c *proxyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *proxyCollector) Collect(ch chan<- prometheus.Metric) {
	if c.serving != nil && !c.serving() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var list crawlv1alpha1.ProxyList
	if err := c.reader.List(ctx, &list); err != nil {
		// An invalid metric fails the scrape visibly instead of reporting
		// zeros that look like an empty fleet.
		ch <- prometheus.NewInvalidMetric(c.desc, fmt.Errorf("listing proxies: %w", err))
		return
	}
	phases := allPhases()
	counts := make(map[crawlv1alpha1.ProxyPhase]int, len(phases))
	for i := range list.Items {
		ph := list.Items[i].Status.Phase
		if ph == "" {
			ph = crawlv1alpha1.PhasePending
		}
		counts[ph]++
	}
	for _, ph := range phases {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[ph]), string(ph))
		delete(counts, ph)
	}
	// A phase this build does not know (newer CRD) is still counted.
	for ph, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), string(ph))
	}
}

// poolCollector exports every ProxyPool's status: replicas by state
// (total, ready, leased, draining), desired replicas and waiting requests.
type poolCollector struct {
	reader                      client.Reader
	timeout                     time.Duration
	serving                     func() bool
	replicas, desired, waitingD *prometheus.Desc
}

func newPoolCollector(reader client.Reader, timeout time.Duration, serving func() bool) *poolCollector {
	return &poolCollector{
		reader: reader, timeout: timeout, serving: serving,
		replicas: prometheus.NewDesc(PoolReplicasName,
			"ProxyPool Proxies by state (total, ready, leased, draining), from the pool's status in the operator's cache.",
			[]string{"namespace", "pool", "state"}, nil),
		desired: prometheus.NewDesc(PoolDesiredName,
			"The size each ProxyPool is heading for (spec.replicas, or its autoscaling decision), by the decision's reason.",
			[]string{"namespace", "pool", "reason"}, nil),
		waitingD: prometheus.NewDesc(PoolWaitingName,
			"Lease requests waiting for a proxy each ProxyPool's template could serve (what its autoscaling grows it by).",
			[]string{"namespace", "pool"}, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.replicas
	ch <- c.desired
	ch <- c.waitingD
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	if c.serving != nil && !c.serving() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var list crawlv1alpha1.ProxyPoolList
	if err := c.reader.List(ctx, &list); err != nil {
		ch <- prometheus.NewInvalidMetric(c.replicas, fmt.Errorf("listing proxy pools: %w", err))
		return
	}
	for i := range list.Items {
		p := &list.Items[i]
		s := p.Status
		for _, st := range []struct {
			state string
			n     int32
		}{{"total", s.Replicas}, {"ready", s.ReadyReplicas}, {"leased", s.LeasedReplicas}, {"draining", s.DrainingReplicas}} {
			ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(st.n), p.Namespace, p.Name, st.state)
		}
		ch <- prometheus.MustNewConstMetric(c.desired, prometheus.GaugeValue, float64(s.DesiredReplicas), p.Namespace, p.Name, s.DesiredReason)
		ch <- prometheus.MustNewConstMetric(c.waitingD, prometheus.GaugeValue, float64(s.WaitingRequests), p.Namespace, p.Name)
	}
}
