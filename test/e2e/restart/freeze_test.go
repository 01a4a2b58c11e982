package restart

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

// freezeFor is how long kube-apiserver is stopped: well past the renew
// deadline (4s) and the leader lease (6s) of electionArgs.
const freezeFor = 30 * time.Second

// TestKubeAPIServerFreeze: two replicas under load while kube-apiserver is
// stopped (SIGSTOP) for 30s. The leader keeps serving from memory until its
// renew deadline, then stops serving (503) and keeps trying its last
// checkpoint; when kube-apiserver answers again that write lands before the
// next leader loads (it waits for it), so no lease is lost and no proxy is
// given out twice.
func TestKubeAPIServerFreeze(t *testing.T) {
	e := setup(t)
	r, extra := e.startPair(t)
	e.waitHealthy(t, r.clients[0])
	ctx := context.Background()

	// Held across the freeze, on proxies the clients below do not use
	// (p050 on), in a flow of their own (one flow is served in order):
	// granted before it, and during it by the leader (from memory).
	var held []string
	hold := func(n int) {
		for range n {
			var l *wire.Lease
			if err := r.do(ctx, func(c *dclient.Client) error {
				var err error
				l, err = c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"id": fmt.Sprintf("p%03d", 50+len(held))}, TTLSeconds: 600, Flow: "hold"})
				return err
			}); err != nil {
				var apiErr *dclient.APIError
				if errors.As(err, &apiErr) && apiErr.NoMatch != nil {
					t.Fatalf("holding lease %d: %v (%+v)", len(held), err, *apiErr.NoMatch)
				}
				t.Fatalf("holding lease %d: %v", len(held), err)
			}
			held = append(held, l.LeaseID)
		}
	}
	hold(10)

	pid := e.cp.PIDs()["kube-apiserver"]
	if pid == 0 {
		t.Fatal("no kube-apiserver pid")
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	load, stop := context.WithCancel(ctx)
	wait := drive(load, r, uint64(time.Now().UnixNano()))
	time.Sleep(3 * time.Second)

	// What each replica answers meanwhile to a lease call (a read of a
	// held lease), twice a second.
	var mu sync.Mutex
	answers := map[string]int{}
	probeStop := make(chan struct{})
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for {
			select {
			case <-probeStop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			for i, c := range r.clients {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := c.Get(pctx, held[0])
				cancel()
				code := "200"
				var apiErr *dclient.APIError
				if errors.As(err, &apiErr) {
					code = fmt.Sprint(apiErr.StatusCode, " ", apiErr.Code)
				} else if err != nil {
					code = "no answer"
				}
				mu.Lock()
				answers[fmt.Sprintf("replica %d: %s", i, code)]++
				mu.Unlock()
			}
		}
	}()

	frozenAt := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	hold(5) // the leader still grants from memory until its renew deadline
	time.Sleep(time.Until(frozenAt.Add(freezeFor)))
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawedAt := time.Now()
	close(probeStop)
	<-probed

	// Someone serves again: the old leader exits after its last write and,
	// as a kubelet would, is started again.
	var back time.Duration
	for deadline := time.Now().Add(90 * time.Second); ; {
		if r.ready(0) || r.ready(1) {
			back = time.Since(thawedAt)
			break
		}
		for i := range r.procs {
			if r.procs[i].Exited() {
				r.procs[i] = e.startOn(t, r.ports[i], extra, false)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica serves 90s after kube-apiserver came back\n%s\n%s", logOf(e, r.ports[0]), logOf(e, r.ports[1]))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(5 * time.Second)
	stop()
	grants := wait()

	res := framework.CheckHistory(grants, []framework.Kill{{At: frozenAt, Signal: "SIGSTOP kube-apiserver"}}, crashWindow)
	t.Logf("freeze of %s: %s; leases served again %s after kube-apiserver came back", freezeFor, res, back.Round(100*time.Millisecond))
	keys := make([]string, 0, len(answers))
	for k := range answers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("during the freeze, %s: %d times", k, answers[k])
	}
	if res.Planned+res.Crash > 0 {
		t.Errorf("a proxy was given out twice: %s", res)
	}
	if res.Grants < 100 {
		t.Errorf("only %d grants: the load was too light to show anything", res.Grants)
	}
	var lost []string
	for _, id := range held {
		if err := r.do(ctx, func(c *dclient.Client) error { _, err := c.Get(ctx, id); return err }); err != nil {
			lost = append(lost, fmt.Sprintf("%s: %v", id, err))
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d leases held across the freeze lost: %v", len(lost), len(held), lost)
	}
}
