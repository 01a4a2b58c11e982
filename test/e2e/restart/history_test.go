package restart

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

const (
	historyClients = 12
	// historyProxies of the 100 are leased, at capacity 1 each, so that
	// clients contend and a proxy given out twice shows.
	historyProxies = 5
	// crashWindow bounds how long before a SIGKILL a lost grant may have
	// been made: one checkpoint interval and the write itself.
	crashWindow = 2 * time.Second
)

// replicas are the two operators of a history run; the client side looks
// for the one that serves, as a Service would route.
type replicas struct {
	ports   [2][4]int
	procs   [2]*framework.OperatorProcess
	clients [2]*dclient.Client
}

func (r *replicas) ready(i int) bool {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", r.ports[i][1]))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// do runs f against the replica that serves, retrying while neither does.
func (r *replicas) do(ctx context.Context, f func(c *dclient.Client) error) error {
	for i := 0; ; i++ {
		err := f(r.clients[i%2])
		var apiErr *dclient.APIError
		if err == nil || (errors.As(err, &apiErr) && apiErr.Code != wire.CodeNotLeader && apiErr.Code != wire.CodeUnavailable) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if i%2 == 1 {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// startPair starts two leader-elected replicas on proxies of capacity 1:
// the first on e.ports, leading; the second on free ports. extra are their
// flags, to start one again.
func (e *env) startPair(t *testing.T) (r *replicas, extra []string) {
	t.Helper()
	r = &replicas{}
	r.ports[0] = e.ports
	ports, err := ports.Free(len(r.ports[1]), e.ports[:]...)
	if err != nil {
		t.Fatal(err)
	}
	r.ports[1] = [4]int(ports)
	extra = append(slices.Clone(electionArgs), "--max-leases-per-proxy=1")
	r.procs[0] = e.startOn(t, r.ports[0], extra, true)
	r.procs[1] = e.startOn(t, r.ports[1], extra, false)
	r.clients[0], r.clients[1] = e.clientOn(t, r.ports[0]), e.clientOn(t, r.ports[1])
	return r, extra
}

// runHistory drives clients against two replicas while kills kill points
// terminate or kill the leader, then checks the recorded history.
func runHistory(t *testing.T, e *env, seed uint64, kills int) framework.HistoryResult {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r, extra := e.startPair(t)

	ctx, stop := context.WithCancel(context.Background())
	wait := drive(ctx, r, seed)

	var points []framework.Kill
	for k := range kills {
		time.Sleep(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
		leader := -1
		for i := range 2 {
			if r.ready(i) {
				leader = i
			}
		}
		if leader < 0 {
			t.Fatalf("kill point %d: no replica is ready", k)
		}
		p := framework.Kill{At: time.Now(), Signal: "SIGTERM"}
		if rng.IntN(2) == 0 {
			p.Signal = "SIGKILL"
			r.procs[leader].Kill()
		} else if err := r.procs[leader].Stop(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		points = append(points, p)
		other := 1 - leader
		deadline := time.Now().Add(leaseDuration + retryPeriod + 10*time.Second)
		for !r.ready(other) {
			if time.Now().After(deadline) {
				t.Fatalf("kill point %d (%s): the standby did not take over", k, p.Signal)
			}
			time.Sleep(50 * time.Millisecond)
		}
		r.procs[leader] = e.startOn(t, r.ports[leader], extra, false)
	}
	time.Sleep(time.Second)
	stop()
	grants := wait()
	for i := range 2 {
		_ = r.procs[i].Stop(30 * time.Second)
	}
	return framework.CheckHistory(grants, points, crashWindow)
}

// drive runs historyClients clients against r until ctx ends: each leases
// one of historyProxies proxies (waiting up to 2s), holds it 10–70 ms and
// releases it. wait returns, once ctx ended, the grants they lived.
func drive(ctx context.Context, r *replicas, seed uint64) (wait func() []framework.Grant) {
	var mu sync.Mutex
	var grants []framework.Grant
	var wg sync.WaitGroup
	for c := range historyClients {
		wg.Add(1)
		crng := rand.New(rand.NewPCG(seed+uint64(c), uint64(c)))
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var l *wire.Lease
				err := r.do(ctx, func(cl *dclient.Client) error {
					var err error
					l, err = cl.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"id": fmt.Sprintf("p%03d", crng.IntN(historyProxies))},
						Target: "history", TTLSeconds: 60, WaitSeconds: 2})
					return err
				})
				if err != nil {
					continue // no_match, queue full, or stopping
				}
				g := framework.Grant{ID: l.LeaseID, Proxy: l.Proxy.Name, Got: time.Now()}
				time.Sleep(time.Duration(10+crng.IntN(60)) * time.Millisecond)
				_ = r.do(context.Background(), func(cl *dclient.Client) error {
					g.Ended = time.Now()
					return cl.Release(context.Background(), g.ID)
				})
				mu.Lock()
				grants = append(grants, g)
				mu.Unlock()
			}
		}()
	}
	return func() []framework.Grant {
		wg.Wait()
		return grants
	}
}

// TestHistoryUnderKills: clients lease, hold and release while the leader
// is terminated or killed at random points; no proxy is given out twice
// except for leases granted just before a crash. HISTORY_KILLS (default 4)
// sets the kill points (make failover: 50), HISTORY_SEED=<n> repeats a run.
func TestHistoryUnderKills(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HISTORY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HISTORY_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("HISTORY_SEED=%d repeats this run", seed)
	kills := 4
	if s := os.Getenv("HISTORY_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("HISTORY_KILLS=%q: want a positive number", s)
		}
		kills = n
	}
	e := setup(t)
	r := runHistory(t, e, seed, kills)
	t.Log(r)
	if r.Grants < 25*kills {
		t.Errorf("only %d grants for %d kill points: the history shows too little", r.Grants, kills)
	}
	if r.Planned > 0 {
		t.Errorf("%s", r)
	}
}
