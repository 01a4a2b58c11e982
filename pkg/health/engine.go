package health

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// Defaults of Options.
const (
	DefaultWorkers           = 8
	DefaultTick              = time.Second
	DefaultMinReportInterval = 60 * time.Second
	DefaultEventBuffer       = 64
	DefaultQueueSize         = 1024
)

// Latency changes smaller than max(minLatencyDelta, latencyDeltaFraction of
// the reported latency) are not reported: the spec's bare ">50%" is undefined
// at 0 ms and would let a proxy jittering 40↔61 ms write status forever.
const (
	minLatencyDelta      = 20 * time.Millisecond
	latencyDeltaFraction = 0.5
)

// maxMessageLen bounds the condition message built from a probe error.
const maxMessageLen = 1024

// Reader lists Proxies; the manager's cache satisfies it.
type Reader interface {
	// List fills list with the Proxies the operator sees. The engine passes
	// client.UnsafeDisableDeepCopy and never modifies or keeps the items, so
	// a cache may hand out its shared objects.
	List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error
}

// ProbeMetrics receives every probe (status writes are transition-only;
// metrics carry the high-frequency signal). pkg/metrics satisfies it.
type ProbeMetrics interface {
	// ObserveProbe records one finished probe of proxy ("namespace/name"):
	// its duration and whether it succeeded. It must not block.
	ObserveProbe(proxy string, d time.Duration, ok bool)
	// Forget deletes every series of proxy; the engine calls it when it
	// prunes the proxy's state (deleted, replaced, or no address).
	Forget(proxy string)
}

// ProbeAuth mints the credentials of one probe of a proxy;
// *proxyauth.Keyring implements it.
type ProbeAuth interface {
	// ProbeCredentials are valid for one probe of p (about a minute).
	ProbeCredentials(p proxyauth.ProxyRef) proxyauth.Credentials
}

// Options configure New. Zero fields take the defaults; Reader is required.
type Options struct {
	// Workers is the number of concurrent probes (default 8).
	Workers int
	// Tick is how often due proxies are looked for (default 1s): a probe
	// starts at the first tick at or after its due time.
	Tick time.Duration
	// MinReportInterval rate-limits latency-only reports of a healthy proxy
	// (default 60s). Verdict changes are never rate-limited.
	MinReportInterval time.Duration
	// EventBuffer is the capacity of the Events channel (default 64).
	EventBuffer int
	// QueueSize bounds probes waiting for a worker (default 1024); a due
	// proxy that finds the queue full is retried at the next tick.
	QueueSize int
	// Clock drives ticks, due times and report times (default real).
	Clock clock.WithTicker
	// Reader lists Proxies (the manager's cache). Required.
	Reader Reader
	// Prober sends probes (default NewHTTPProber with Denied).
	Prober Prober
	// Auth, when set, mints the credentials probes of Managed proxies send
	// (the proxies refuse requests without; External ones check none).
	Auth ProbeAuth
	// Denied is what the default Prober may not reach.
	Denied dialpolicy.Denylist
	// Metrics receives every probe (default none).
	Metrics ProbeMetrics
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	if o.MinReportInterval <= 0 {
		o.MinReportInterval = DefaultMinReportInterval
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = DefaultEventBuffer
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Prober == nil {
		o.Prober = NewHTTPProber(o.Clock, o.Denied)
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	return o
}

// Snapshot is the engine's last reported verdict about one Proxy: exactly
// what the reconciler stages into status. It changes only when the engine
// emits an event, so reading it on an unrelated reconcile causes no write.
type Snapshot struct {
	// Healthy is the thresholded verdict.
	Healthy bool
	// Latency is the reported probe latency; zero when unhealthy.
	Latency time.Duration
	// CheckedAt is the time of the status-affecting probe.
	CheckedAt time.Time
	// Reason is ProbeSucceeded or ProbeFailed.
	Reason string
	// Message explains the verdict (the failing probe's error when unhealthy).
	Message string
	// ProxyURL is the proxy the verdict was probed through; a snapshot about
	// another URL than the Proxy's current one is stale.
	ProxyURL string
}

// LatencyMillis is Latency in whole milliseconds, as status carries it.
func (s Snapshot) LatencyMillis() int64 { return s.Latency.Milliseconds() }

// HealthEvent is what the engine sends: a generic event whose object carries
// only the Proxy's namespace and name, enough to enqueue it.
type HealthEvent = event.TypedGenericEvent[*crawlv1alpha1.Proxy]

// Engine probes Proxies through themselves and tracks their health. Create it
// with New, add it to the manager, hand Events and Snapshot to the reconciler.
type Engine struct {
	opts   Options
	events chan HealthEvent
	// jitter returns a duration in [0, d); replaced by tests.
	jitter  func(d time.Duration) time.Duration
	started atomic.Bool

	mu     sync.Mutex
	states map[types.NamespacedName]*proxyState

	probes, failures, saturated, missed, sent, dropped atomic.Uint64
}

var (
	_ manager.Runnable               = (*Engine)(nil)
	_ manager.LeaderElectionRunnable = (*Engine)(nil)
)

// New returns an engine; it does nothing until Start.
func New(opts Options) (*Engine, error) {
	if opts.Reader == nil {
		return nil, errors.New("health engine: Reader is required")
	}
	opts = opts.withDefaults()
	return &Engine{
		opts:   opts,
		events: make(chan HealthEvent, opts.EventBuffer),
		jitter: randomJitter,
		states: map[types.NamespacedName]*proxyState{},
	}, nil
}

// Events is the channel of transition events for the reconciler's
// source.Channel. It is never closed.
func (e *Engine) Events() <-chan HealthEvent { return e.events }

// NeedLeaderElection makes the engine run on the leader only: two engines
// would emit competing verdicts.
func (e *Engine) NeedLeaderElection() bool { return true }

// Snapshot returns the last reported verdict about the Proxy key, and false
// when there is none in this engine's lifetime (never probed, still below a
// threshold, seeded from status after a handover and not changed since, or
// pruned). It never blocks on probes.
func (e *Engine) Snapshot(key types.NamespacedName) (Snapshot, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.states[key]
	if st == nil || st.snap == nil {
		return Snapshot{}, false
	}
	return *st.snap, true
}

// identity is what makes a state about one instance: a new UID (recreated
// object), providerID (replaced instance) or proxy URL (new address) starts
// fresh counters.
type identity struct {
	uid        types.UID
	providerID string
	proxyURL   string
}

type proxyState struct {
	id identity
	hc crawlv1alpha1.HealthCheck // defaulted, refreshed every tick

	due      time.Time
	inFlight bool
	// spread: the next due time is drawn across the interval instead of
	// one interval later (set for never-probed proxies, whose first probe
	// is not jittered, so a fleet created at once does not probe in
	// lockstep forever).
	spread bool

	consecOK, consecFail int32
	hasVerdict, healthy  bool
	lastOKLatency        time.Duration

	// Reported markers: what the reconciler was last told. They advance
	// only when an event was actually sent.
	reported        bool
	reportedHealthy bool
	reportedLatency time.Duration
	reportedAt      time.Time

	snap *Snapshot
}

type job struct {
	st     *proxyState
	target Target
}

// Start runs the workers and the tick loop until ctx ends, then waits for
// in-flight probes to return. It may be called once.
func (e *Engine) Start(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("health engine: already started")
	}
	logger := log.FromContext(ctx).WithName("health")
	ctx = log.IntoContext(ctx, logger)
	logger.Info("starting health engine", "workers", e.opts.Workers, "tick", e.opts.Tick)

	jobs := make(chan job, e.opts.QueueSize)
	var wg sync.WaitGroup
	for range e.opts.Workers {
		wg.Go(func() { e.worker(ctx, jobs) })
	}
	defer wg.Wait()

	ticker := e.opts.Clock.NewTicker(e.opts.Tick)
	defer ticker.Stop()
	e.tick(ctx, e.opts.Clock.Now(), jobs)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			e.tick(ctx, e.opts.Clock.Now(), jobs)
		}
	}
}

func (e *Engine) worker(ctx context.Context, jobs <-chan job) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-jobs:
			e.run(ctx, j)
		}
	}
}

// run sends one probe and records its result.
func (e *Engine) run(ctx context.Context, j job) {
	latency, err := e.opts.Prober.Probe(ctx, j.target)
	if ctx.Err() != nil {
		return // shutting down: a cancelled probe says nothing about the proxy
	}
	e.record(ctx, j, latency, err, e.opts.Clock.Now())
}

// tick reconciles the state map with the cache and dispatches due probes.
func (e *Engine) tick(ctx context.Context, now time.Time, jobs chan<- job) {
	var list crawlv1alpha1.ProxyList
	if err := e.opts.Reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		// Keep every state: an unreadable cache is not a deleted fleet.
		log.FromContext(ctx).Error(err, "listing proxies")
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := make(map[types.NamespacedName]struct{}, len(list.Items))
	full := false
	for i := range list.Items {
		p := &list.Items[i]
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		proxyURL := p.ProxyURL()
		if proxyURL == "" || !p.DeletionTimestamp.IsZero() {
			continue // not seen: pruned below
		}
		seen[key] = struct{}{}
		id := identity{uid: p.UID, providerID: p.Status.ProviderID, proxyURL: proxyURL}
		st := e.states[key]
		if st != nil && st.id != id {
			e.pruneLocked(key)
			st = nil
		}
		if st == nil {
			st = e.newState(p, id, now)
			e.states[key] = st
		}
		st.hc = copyHealthCheck(p.Spec.HealthCheck.WithDefaults())
		if full || st.inFlight || now.Before(st.due) {
			continue
		}
		j := job{st: st, target: Target{Key: key, ProxyURL: proxyURL, HealthCheck: st.hc}}
		if e.opts.Auth != nil && !p.Spec.IsExternal() {
			j.target.ProxyUser = e.opts.Auth.ProbeCredentials(proxyauth.ProxyRef{Namespace: p.Namespace, Name: p.Name}).Userinfo()
		}
		select {
		case jobs <- j:
			st.inFlight = true
			e.schedule(st, now)
		default:
			// Saturated pool: the proxy stays due and is retried next tick.
			e.saturated.Add(1)
			full = true
		}
	}
	for key := range e.states {
		if _, ok := seen[key]; !ok {
			e.pruneLocked(key)
		}
	}
}

// schedule sets the due time after a dispatch at now. Due times advance by
// whole intervals from the previous due time, so ticks do not accumulate
// drift; a probe an interval or more late counts as missed and restarts the
// schedule from now.
func (e *Engine) schedule(st *proxyState, now time.Time) {
	interval := time.Duration(st.hc.IntervalSeconds) * time.Second
	if st.spread {
		st.spread = false
		st.due = now.Add(interval - e.jitter(interval))
		return
	}
	if now.Sub(st.due) >= interval {
		e.missed.Add(1)
		st.due = now.Add(interval)
		return
	}
	st.due = st.due.Add(interval)
}

// newState starts tracking a proxy. A Healthy condition already in status
// about its current address (leader handover, operator restart) seeds the verdict and the reported
// markers with counters zeroed, so a healthy fleet does not flap on restart
// yet a real transition still needs a full threshold run; its first probe
// is jittered across the interval to spread the restart. A never-probed
// proxy probes at once.
func (e *Engine) newState(p *crawlv1alpha1.Proxy, id identity, now time.Time) *proxyState {
	st := &proxyState{id: id, due: now, spread: true}
	c := p.Condition(crawlv1alpha1.ConditionHealthy)
	if c == nil || (c.Status != metav1.ConditionTrue && c.Status != metav1.ConditionFalse) || !p.HealthIsAboutThisAddress() {
		return st // nothing to seed from, or a verdict about another address
	}
	st.spread = false
	st.hasVerdict, st.healthy = true, c.Status == metav1.ConditionTrue
	st.reported, st.reportedHealthy = true, st.healthy
	if st.healthy && p.Status.LatencyMillis != nil {
		st.reportedLatency = time.Duration(*p.Status.LatencyMillis) * time.Millisecond
		st.lastOKLatency = st.reportedLatency
	}
	if p.Status.LastHealthCheckTime != nil {
		st.reportedAt = p.Status.LastHealthCheckTime.Time
	}
	interval := time.Duration(p.Spec.HealthCheck.WithDefaults().IntervalSeconds) * time.Second
	st.due = now.Add(e.jitter(interval))
	return st
}

// pruneLocked forgets a proxy's state and metric series. An in-flight probe
// of it finds its state gone and is discarded.
func (e *Engine) pruneLocked(key types.NamespacedName) {
	delete(e.states, key)
	e.opts.Metrics.Forget(key.String())
}
