package realnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

const (
	// loadClients lease through kube-apiserver at once (the fleet has two
	// proxies: they wait, fairly, for each other).
	loadClients = 4
	loadTTL     = 30
	loadWait    = 5
)

// leaseLoad is what the clients lived: every grant, every lease found gone
// when its holder released it, and every error by reason.
type leaseLoad struct {
	mu     sync.Mutex
	grants []framework.Grant
	lost   []string
	errs   map[string]int
	sample map[string]string
}

// retriedReasons are the answers a client meets while the leader changes
// and retries; any other is a wrong answer.
var retriedReasons = map[metav1.StatusReason]bool{
	metav1.StatusReasonServiceUnavailable: true, metav1.StatusReasonTooManyRequests: true,
	metav1.StatusReasonTimeout: true, metav1.StatusReasonConflict: true, metav1.StatusReasonUnknown: true,
}

func (l *leaseLoad) failed(op string, err error) {
	reason := string(apierrors.ReasonForError(err))
	if reason == "" {
		reason = "transport"
		if errors.Is(err, context.DeadlineExceeded) {
			reason = "timeout"
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := op + " " + reason
	l.errs[key]++
	if l.sample[key] == "" {
		l.sample[key] = err.Error()
	}
}

// drive runs the clients through the ProxyLease API until ctx ends; each
// acquires, holds 50-150 ms and releases, retrying what fails.
func (c *cluster) drive(ctx context.Context, l *leaseLoad) (wait func()) {
	leases := c.leasing.LeasingV1alpha1().ProxyLeases(crawlNS)
	var wg sync.WaitGroup
	for i := range loadClients {
		wg.Go(func() {
			for ctx.Err() == nil {
				pl := &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "load-"},
					Spec: leasingv1alpha1.ProxyLeaseSpec{Target: fmt.Sprintf("site-%d.example", i), TTLSeconds: ptr.To[int32](loadTTL), WaitSeconds: loadWait}}
				got, err := leases.Create(ctx, pl, metav1.CreateOptions{})
				if err != nil {
					if ctx.Err() == nil {
						l.failed("acquire", err)
						time.Sleep(200 * time.Millisecond)
					}
					continue
				}
				g := framework.Grant{ID: got.Status.LeaseID, Got: time.Now()}
				if got.Status.Proxy == nil {
					l.failed("acquire", fmt.Errorf("ProxyLease %s granted without a proxy", got.Name))
				} else {
					g.Proxy = got.Status.Proxy.Name
				}
				time.Sleep(time.Duration(50+100*i/loadClients) * time.Millisecond)
				// Held until a release is answered; bounded by the TTL.
				for deadline := time.Now().Add(loadTTL * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
					g.Ended = time.Now()
					rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := leases.Delete(rctx, got.Name, metav1.DeleteOptions{})
					cancel()
					if err == nil || apierrors.IsNotFound(err) {
						l.mu.Lock()
						l.grants = append(l.grants, g)
						if err != nil {
							l.lost = append(l.lost, got.Name+" at "+g.Ended.Format("15:04:05.000"))
						}
						l.mu.Unlock()
						break
					}
					l.failed("release", err)
				}
			}
		})
	}
	return wg.Wait
}

func (c *cluster) restartAndDrain(t *testing.T) {
	l := &leaseLoad{errs: map[string]int{}, sample: map[string]string{}}
	ctx, stop := context.WithCancel(context.Background())
	wait := c.drive(ctx, l)
	stopped := false
	finish := func() {
		if !stopped {
			stopped = true
			stop()
			wait()
		}
	}
	defer finish()
	time.Sleep(5 * time.Second)

	c.must(t, time.Minute, nil, "-n", operatorNS, "rollout", "restart", "deploy/proxy-operator")
	c.waitInstalled(t)
	time.Sleep(5 * time.Second)

	// One node: the drain evicts one replica (the disruption budget keeps
	// the other), whose replacement cannot schedule on the cordoned node;
	// the second eviction waits on the budget until the drain's timeout.
	// Uncordoned, the replacement starts.
	nodes, err := c.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("want one node: %v %v", nodes, err)
	}
	node := nodes.Items[0].Name
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	out, derr := c.kubectl(dctx, nil, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
		"--pod-selector=app.kubernetes.io/name=proxy-operator", "--timeout=30s")
	cancel()
	evicted := strings.Count(out, "evicted")
	c.must(t, time.Minute, nil, "uncordon", node)
	if evicted != 1 {
		t.Errorf("drain evicted %d operator pods, want 1 (the budget keeps one): %v\n%s", evicted, derr, out)
	}
	c.waitInstalled(t)
	time.Sleep(5 * time.Second)
	finish()

	res := framework.CheckHistory(l.grants, nil, 0)
	t.Logf("%s; errors %v", res, l.errs)
	if res.Grants < 20 {
		t.Errorf("%d grants under load, want at least 20", res.Grants)
	}
	if res.Planned+res.Crash > 0 {
		t.Errorf("a proxy granted twice: %s", res)
	}
	if len(l.lost) > 0 {
		t.Errorf("%d leases lost (gone when their holder released them): %v", len(l.lost), l.lost)
	}
	for key, n := range l.errs {
		reason := metav1.StatusReason(key[strings.Index(key, " ")+1:])
		if !retriedReasons[reason] && reason != "transport" && reason != "timeout" {
			t.Errorf("%d wrong answers %q, e.g. %s", n, key, l.sample[key])
		}
	}
}
