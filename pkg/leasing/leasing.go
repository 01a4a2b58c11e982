package leasing

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol/flowcontrolmetrics"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/sites/sitesync"
)

// Leasing is the lease store with the wait queue in front of it, as both
// lease APIs use them.
type Leasing struct {
	// Store holds the leases and cooldowns; feed it Proxies with
	// lease.NewProxySync on the manager's Proxy informer.
	Store *lease.Store
	// Waiter is the queue every acquire goes through (the Services' Queue).
	Waiter *Waiter
	// Gate, when set before Service is called, keeps the services closed
	// until this replica takes over (Takeover); nil: they always serve.
	Gate *Gate
	// IDs, when set before Service is called, reads signed lease IDs so
	// the services take back leases lost in a crash (see Service.Reclaim).
	IDs IDVerifier
	// Auth, when set before Service is called, mints the credentials of
	// each lease's proxy (pkg/proxyauth); nil: proxies check none.
	Auth ProxyAuth

	clock        clock.PassiveClock
	ctl          *LeaseController
	queueMetrics *flowcontrolmetrics.Metrics
	stopHook     func()
	stopHeld     func()
	priorities   PriorityGrants
}

// Clock is what the store (its sweep ticker) and the queue (its timer) need;
// clock.RealClock and the fake clocks of k8s.io/utils/clock/testing have it.
type Clock interface {
	clock.WithTicker
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// NewWithStore puts the wait queue of opts (its Queue… fields) in front of
// store, whose own options stay as they are.
func NewWithStore(store *lease.Store, opts Options, clk Clock) *Leasing {
	qm := flowcontrolmetrics.New()
	qopts := opts.queueOptions(qm)
	qopts.HeldChangeNotifications = true
	ctl := NewLeaseController(store, clk, qopts)
	return &Leasing{
		Store:        store,
		Waiter:       NewWaiter(ctl, store),
		clock:        clk,
		ctl:          ctl,
		queueMetrics: qm,
		// Capacity the store observes wakes the queue.
		stopHook:   store.OnCapacity(ctl.OnCapacity),
		stopHeld:   ReportHeldChanges(store, ctl),
		priorities: opts.MaxPriority,
	}
}

// Shutdown evicts every waiter (answered ReasonShuttingDown) and unhooks
// the queue from the store, as the queue's Runnable does at stop.
func (l *Leasing) Shutdown(ctx context.Context) error {
	l.stopHook()
	l.stopHeld()
	return l.ctl.Shutdown(ctx)
}

// ReportHeldChanges tells ctl of every change of a holder's held leases (a
// grant, a release, an expiry, a lease ended with its Proxy), so that with
// Options.HeldChangeNotifications a dispatch round re-reads Held only for
// that holder's flows instead of for every waiting flow. It returns the
// cancel of the subscription.
func ReportHeldChanges(store *lease.Store, ctl *LeaseController) (cancel func()) {
	return store.Subscribe(func(ev lease.Event) {
		if ev.Type == lease.Added || ev.Type == lease.Deleted {
			// Held is per holder (leaseDispatcher.Held): every waiting
			// flow of the holder is re-read.
			ctl.HeldChanged(ev.Lease.Holder)
		}
	})
}

// ServingName is the gauge that is 1 on the replica that serves leases and 0
// on a standby: the alert that no replica serves reads it.
const ServingName = "proxy_operator_leases_serving"

// Collectors are the metrics of the store and the queue
// (proxy_operator_leases_active, proxy_operator_leases_serving and the
// flow-control metrics), for the caller to register.
func (l *Leasing) Collectors() []prometheus.Collector {
	serving := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: ServingName,
		Help: "1 while this replica serves leases (the leader, its lease checkpoint loaded), else 0.",
	}, func() float64 {
		if l.Ready() {
			return 1
		}
		return 0
	})
	return []prometheus.Collector{lease.NewActiveLeasesCollector(l.Store), sitesync.NewCollector(l.Store), serving, l.queueMetrics}
}

// Runnables are the store's sweep and the queue's shutdown, none
// leader-elected: every replica keeps a store (a standby's fills only when it
// takes over, see Takeover). At stop the queue evicts every waiter (answered
// 503), so the API servers' graceful shutdown does not wait out long waits.
func (l *Leasing) Runnables() []manager.Runnable {
	return []manager.Runnable{l.Store, &queueRunnable{l: l}}
}

// Ready is true once this replica serves leases (its Gate is open; always
// without one): before that its store is empty, and every proxy would look
// unleased to a ProxyPool shrinking itself.
func (l *Leasing) Ready() bool { return l.Gate.IsOpen() }

// LeaseCounts are the live leases per proxy.
func (l *Leasing) LeaseCounts() map[lease.ProxyKey]int { return l.Store.Counts() }

// Waiting counts the acquire requests waiting in the queue that match
// accepts (a ProxyPool sizes itself from those it could serve).
func (l *Leasing) Waiting(match func(lease.AcquireRequest) bool) int { return l.ctl.Waiting(match) }

// LeasesPerProxy is how many leases one proxy takes.
func (l *Leasing) LeasesPerProxy() int { return l.Store.Options().MaxLeasesPerProxy }
