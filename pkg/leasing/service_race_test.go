package leasing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// capacityChecker follows the store's events, which arrive in revision
// order, and records every instant at which a proxy holds more live leases
// than cap.
type capacityChecker struct {
	cap        int
	mu         sync.Mutex
	live       map[lease.ProxyKey]int
	violations []string
}

func (c *capacityChecker) observe(ev lease.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := ev.Lease.Proxy.Key()
	switch ev.Type {
	case lease.Added:
		c.live[k]++
		if c.live[k] > c.cap {
			c.violations = append(c.violations, fmt.Sprintf("%s holds %d leases at revision %d, capacity %d", k, c.live[k], ev.Revision, c.cap))
		}
	case lease.Deleted:
		c.live[k]--
	}
}

// hammer runs workers that acquire (some waiting), renew, report and
// release through svc until each has done ops operations, and returns what
// went wrong beyond the expected refusals.
func hammer(t *testing.T, svc *Service, store *lease.Store, workers, ops int) []string {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			holder := fmt.Sprintf("http:w%d", w%6)
			var mine []string
			for range ops {
				switch op := rng.IntN(10); {
				case op < 5:
					wait := time.Duration(rng.IntN(3)) * 10 * time.Millisecond
					l, err := svc.Acquire(context.Background(), Request{
						Namespace: "ns", Identity: Identity{Holder: holder, Flow: holder}, TTL: time.Hour,
						Wait: wait, Priority: rng.IntN(2) - 1, // two bands, no grant needed
					})
					switch {
					case err == nil:
						mine = append(mine, l.ID)
					case IsNoMatch(err), IsQueueFull(err):
					default:
						mu.Lock()
						errs = append(errs, fmt.Sprintf("acquire: %v", err))
						mu.Unlock()
					}
				case op < 7 && len(mine) > 0:
					id := mine[rng.IntN(len(mine))]
					if _, err := svc.Renew(holder, id, time.Hour); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Sprintf("renew of a held lease: %v", err))
						mu.Unlock()
					}
					if err := svc.Report(holder, id, lease.ResultOK, ""); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Sprintf("report on a held lease: %v", err))
						mu.Unlock()
					}
				case len(mine) > 0:
					i := rng.IntN(len(mine))
					if ok, err := svc.Release(holder, mine[i]); !ok || err != nil {
						mu.Lock()
						errs = append(errs, fmt.Sprintf("release of a held lease: %v %v", ok, err))
						mu.Unlock()
					}
					mine = append(mine[:i], mine[i+1:]...)
				}
			}
			for _, id := range mine {
				_, _ = svc.Release(holder, id)
			}
		}()
	}
	wg.Wait()
	if n := store.Active(); n != 0 {
		errs = append(errs, fmt.Sprintf("%d leases left after every worker released its own", n))
	}
	return errs
}

func raceEnv(t *testing.T, storeCap int, q func(*Leasing) Queue) (*Service, *lease.Store, *capacityChecker) {
	t.Helper()
	store, err := lease.New(lease.Options{MaxLeasesPerProxy: storeCap, MaxTTL: 2 * time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: fmt.Sprintf("p%d", i), URL: "http://127.0.0.2:3128", Host: "127.0.0.2", Port: 3128, Healthy: true})
	}
	opts := DefaultOptions()
	opts.QueueMaxPerFlow = 4
	l := NewWithStore(store, opts, clock.RealClock{})
	t.Cleanup(func() { _ = l.Shutdown(context.Background()) })
	checker := &capacityChecker{cap: 2, live: map[lease.ProxyKey]int{}}
	t.Cleanup(store.Subscribe(checker.observe))
	rec := &countingRecorder{}
	svc, err := NewService(APIHTTP, time.Second, ServiceDeps{Store: store, Queue: q(l), Recorder: &lockedRecorder{r: rec}})
	if err != nil {
		t.Fatal(err)
	}
	return svc, store, checker
}

type lockedRecorder struct {
	mu sync.Mutex
	r  *countingRecorder
}

func (l *lockedRecorder) LeaseRequest(api, outcome string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.r.LeaseRequest(api, outcome)
}

// The store's invariants hold under concurrent use of the service with the
// real wait queue: no proxy over its capacity at any revision, every lease
// accounted for, every held lease renewable, reportable and releasable by
// its holder. Run with -race.
func TestServiceUnderConcurrency(t *testing.T) {
	svc, store, checker := raceEnv(t, 2, func(l *Leasing) Queue { return l.Waiter })
	errs := hammer(t, svc, store, 24, 150)
	errs = append(errs, checker.violations...)
	for _, e := range errs {
		t.Error(e)
	}
}

// Negative control: the same workload and checker, through a queue over a
// store that lets a proxy take more leases than the capacity checked, is
// caught.
func TestCapacityCheckerCatchesOverGranting(t *testing.T) {
	svc, store, checker := raceEnv(t, 3, func(l *Leasing) Queue { return l.Waiter })
	hammer(t, svc, store, 24, 150)
	if len(checker.violations) == 0 {
		t.Error("the checker saw no proxy over capacity in a store that allows one more")
	}
}
