package restart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

const (
	electionID     = "proxy-operator.crawl.example.com"
	failoverLeases = 500
	leaseDuration  = 6 * time.Second
	retryPeriod    = time.Second
)

// electionArgs elect a leader in the operator's namespace, with a short
// lease so the crash case is quick.
var electionArgs = []string{"--leader-elect", "--leader-election-namespace=" + operatorNS,
	"--leader-election-lease-duration=" + leaseDuration.String(), "--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"}

// TestFailover: with two replicas only the leader serves leases (the standby
// is Ready, fails /readyz/leases and answers 503 naming the leader); SIGTERM of the leader
// hands over within seconds with every lease; SIGKILL of the new leader is
// survived within the leader lease duration with every lease of the last
// checkpoint.
func TestFailover(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	picked, err := ports.Free(4, e.ports[:]...)
	if err != nil {
		t.Fatal(err)
	}
	portsB := [4]int(picked)
	a := e.startOn(t, e.ports, electionArgs, true)
	b := e.startOn(t, portsB, electionArgs, false)
	ca, cb := e.clientOn(t, e.ports), e.clientOn(t, portsB)
	holder := func() string {
		l, err := e.kube.CoordinationV1().Leases(operatorNS).Get(ctx, electionID, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			t.Fatalf("leader-election Lease: %v", err)
		}
		return *l.Spec.HolderIdentity
	}
	readyz := func(ports [4]int, path string) int {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", ports[1], path))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	readyzVerbose := func(ports [4]int) string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz?exclude=leases&verbose", ports[1]))
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		healthy := true
		list, err := ca.ListProxies(ctx, dclient.ListOptions{Healthy: &healthy})
		return err == nil && len(list) == proxies, nil
	}); err != nil {
		t.Fatalf("proxies not healthy: %v", err)
	}
	ids := make([]string, failoverLeases)
	if err := parallel(failoverLeases, func(i int) error {
		l, err := ca.Acquire(ctx, wire.AcquireRequest{Target: fmt.Sprintf("f-%d", i), TTLSeconds: leaseTTL})
		if err == nil {
			ids[i] = l.LeaseID
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// The standby: Ready as the pod's probe asks (healthy), not serving
	// leases (/readyz/leases), and 503 not_leader naming the leader.
	// The standby was started without waiting for it; it becomes Ready once
	// its informers have synced and its aggregated server has loaded the
	// front proxy's CA, which takes longer on a loaded machine.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return readyz(portsB, "/readyz?exclude=leases") == http.StatusOK, nil
	}); err != nil {
		t.Errorf("standby /readyz?exclude=leases not 200 within 60s, want Ready (both replicas are Ready): %s", readyzVerbose(portsB))
	}
	if code := readyz(portsB, "/readyz/leases"); code != http.StatusInternalServerError && code != http.StatusServiceUnavailable {
		t.Errorf("standby /readyz/leases %d, want it failing", code)
	}
	_, err = cb.Get(ctx, ids[0])
	var apiErr *dclient.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Code != wire.CodeNotLeader {
		t.Fatalf("a lease from the standby: %v, want 503 not_leader", err)
	}
	if got, want := apiErr.Leader, holder(); got != want {
		t.Errorf("standby names the leader %q, the election Lease %q", got, want)
	}

	// Planned handover.
	stopAt := time.Now()
	if err := a.Stop(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cb.Get(ctx, ids[0])
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the standby did not take over within 30s of SIGTERM: %v\n%s", err, logtail.File(logOf(e, portsB), 40))
	}
	t.Logf("planned handover: the standby served leases %s after SIGTERM of the leader", time.Since(stopAt).Round(10*time.Millisecond))
	assertAll := func(c *dclient.Client, when string) {
		t.Helper()
		var lost int
		if err := parallel(failoverLeases, func(i int) error {
			if _, err := c.Get(ctx, ids[i]); err != nil {
				lost++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if lost > 0 {
			t.Fatalf("%s: %d of %d leases lost", when, lost, failoverLeases)
		}
	}
	assertAll(cb, "after the planned handover")
	if code := readyz(portsB, "/readyz/leases"); code != 200 {
		t.Errorf("new leader readyz %d", code)
	}

	// A standby again, then the leader crashes.
	e.startOn(t, e.ports, electionArgs, false)
	secretRV := func() string {
		s, err := e.kube.CoreV1().Secrets(operatorNS).Get(ctx, "leases", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.ResourceVersion
	}
	// Two checkpoint writes after a change: the leases are in it.
	for range 2 {
		rv := secretRV()
		if l, err := cb.Acquire(ctx, wire.AcquireRequest{Target: "tick", TTLSeconds: 60}); err == nil {
			_ = cb.Release(ctx, l.LeaseID)
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return secretRV() != rv, nil
		}); err != nil {
			t.Fatal("no checkpoint written")
		}
	}
	killAt := time.Now()
	b.Kill()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := ca.Get(ctx, ids[0])
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no takeover within 60s of SIGKILL of the leader: %v", err)
	}
	took := time.Since(killAt)
	t.Logf("crash of the leader: the standby served leases %s after SIGKILL", took.Round(10*time.Millisecond))
	// The lease duration, a retry, the takeover grace (1s: the dead leader
	// might still have been writing its last checkpoint) and the takeover
	// itself (checkpoint load, informer sync) with room for a busy machine.
	if limit := leaseDuration + retryPeriod + time.Second + 3*time.Second; took > limit {
		t.Errorf("takeover after SIGKILL took %s, over the leader lease duration %s, a retry, the 1s grace and 3s", took, leaseDuration)
	}
	assertAll(ca, "after the crash")
}

func logOf(e *env, ports [4]int) string {
	return fmt.Sprintf("%s/operator-%d.log", e.dir, ports[0])
}
