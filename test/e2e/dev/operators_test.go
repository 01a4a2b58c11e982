package deve2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/test/devenv"
)

// leaseClient is e's HTTP lease API client (Env.LeaseClient) at url.
func leaseClient(t *testing.T, e *devenv.Env, url string) *dclient.Client {
	t.Helper()
	c, err := e.LeaseClient(url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cmdline is the command line of pid ("" if gone).
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// awaitNewPID waits until o runs a process other than old, and url answers
// 200.
func awaitNewPID(t *testing.T, o devenv.Operator, old int, url string, within time.Duration) int {
	t.Helper()
	var pid int
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		pid = o.PID()
		if pid == 0 || pid == old {
			return false, nil
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("%s not back within %s of the kill (pid %d → %d): %v", o.Name, within, old, pid, err)
	}
	return pid
}

// operatorRestarts: the operator runs as its own process (bin/proxy-operator,
// its pid in .dev/operator.pid); killed, it is started again on the same
// addresses, with its leases.
func (h *harness) operatorRestarts(t *testing.T) {
	if len(h.env.Operators) != 1 {
		t.Fatalf("%d operators, want 1", len(h.env.Operators))
	}
	o := h.env.Operators[0]
	pid := o.PID()
	if filepath.Base(o.PIDFile) != "operator.pid" || !strings.Contains(cmdline(pid), "proxy-operator") {
		t.Fatalf("pid file %s names %d (%q), want the operator process", o.PIDFile, pid, cmdline(pid))
	}
	ctx := context.Background()
	c := leaseClient(t, h.env, "")
	kept, err := c.Acquire(ctx, wire.AcquireRequest{Target: "restart", TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // in a checkpoint
	late, err := c.Acquire(ctx, wire.AcquireRequest{Target: "restart-late", TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	next := awaitNewPID(t, o, pid, h.env.HealthProbeURL+"/readyz", 60*time.Second)
	t.Logf("operator pid %d killed; pid %d serves on the same addresses %s later", pid, next, time.Since(killed).Round(100*time.Millisecond))
	// The same URL, token and CA: the checkpointed lease is there, the one
	// granted just before the kill comes back on renew (signed ID).
	c = leaseClient(t, h.env, "")
	if l, err := c.Get(ctx, kept.LeaseID); err != nil || l.Proxy.Name != kept.Proxy.Name {
		t.Errorf("checkpointed lease after the restart: %+v, %v", l, err)
	}
	if l, err := c.Renew(ctx, late.LeaseID, time.Minute); err != nil || l.Proxy.Name != late.Proxy.Name {
		t.Errorf("lease granted just before the kill, renewed after: %+v, %v", l, err)
	}
	for _, id := range []string{kept.LeaseID, late.LeaseID} {
		if err := c.Release(ctx, id); err != nil {
			t.Errorf("release: %v", err)
		}
	}
	// kube-apiserver reaches the new process too.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		_, err := h.runKubectl("", "get", "proxyleases")
		return err == nil, nil
	}); err != nil {
		t.Errorf("kubectl get proxyleases after the restart: %v", err)
	}
}

// TestTwoOperators: `bin/dev -operators 2` runs two leader-elected operator
// processes behind the same addresses; killing the leader hands over to
// the other with the leases, and the killed one comes back as the standby.
func TestTwoOperators(t *testing.T) {
	// With kube-controller-manager, as `bin/dev -controller-manager` runs it
	// (Start waits until its serviceaccount controller has worked).
	env := startEnv(t, devenv.Options{Operators: 2, NodeName: "proxy-operator-dev-two", ControllerManager: true,
		PoolFirst: netip.MustParseAddr("127.0.12.2"), PoolLast: netip.MustParseAddr("127.0.12.60"),
		GCEPoolFirst: netip.MustParseAddr("127.0.12.100"), GCEPoolLast: netip.MustParseAddr("127.0.12.140"),
	})
	if len(env.Operators) != 2 {
		t.Fatalf("%d operators, want 2", len(env.Operators))
	}
	leader := func() int {
		for i, o := range env.Operators {
			if o.Serving() {
				return i
			}
		}
		return -1
	}
	for i, o := range env.Operators {
		if want := fmt.Sprintf("operator-%d.pid", i); filepath.Base(o.PIDFile) != want || !strings.Contains(cmdline(o.PID()), "proxy-operator") {
			t.Fatalf("operator %d: pid file %s (pid %d), want %s naming the operator", i, o.PIDFile, o.PID(), want)
		}
	}
	ctx := context.Background()
	c := leaseClient(t, env, "")
	held, err := c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"tier": "standard"}, Target: "handover", TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	// Every replica serves the gateway, the standby too (it leases through
	// the Service's address, which reaches the leader).
	for i, o := range env.Operators {
		proxy, err := url.Parse(o.GatewayURL)
		if err != nil {
			t.Fatal(err)
		}
		proxy.User = url.UserPassword("", env.DiscoveryToken)
		hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: 60 * time.Second}
		resp, err := hc.Get(env.OriginURL + "/")
		if err != nil {
			t.Fatalf("operator %d's gateway (serving: %v): %v", i, o.Serving(), err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("operator %d's gateway (serving: %v) answered %d: %s", i, o.Serving(), resp.StatusCode, body)
		}
	}
	for round, signal := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		l := leader()
		if l < 0 {
			t.Fatalf("round %d: no operator is ready", round)
		}
		other := env.Operators[1-l]
		if resp, err := http.Get(other.HealthProbeURL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatalf("round %d: both operators ready", round)
			}
		}
		// The standby, reached directly, names the leader.
		oc := leaseClient(t, env, other.DiscoveryURL)
		if _, err := oc.Get(ctx, held.LeaseID); !dclient.IsNotLeader(err) {
			t.Errorf("round %d: the standby answered %v, want 503 not_leader", round, err)
		}
		time.Sleep(2500 * time.Millisecond) // the lease in a checkpoint
		pid := env.Operators[l].PID()
		sent := time.Now()
		if err := syscall.Kill(pid, signal); err != nil {
			t.Fatal(err)
		}
		// The signal has taken effect once the leader is no longer ready:
		// until then a terminating leader may still answer itself.
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			return !env.Operators[l].Serving(), nil
		}); err != nil {
			t.Fatalf("round %d (%s): the leader still ready 60s later", round, signal)
		}
		// Through the same address the lease is served again, by whichever
		// replica leads now: the stopped one is restarted within a second
		// and campaigns as the standby does.
		now := -1
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			got, err := c.Get(ctx, held.LeaseID)
			now = leader()
			return err == nil && got.Proxy.Name == held.Proxy.Name && now >= 0, nil
		}); err != nil {
			t.Fatalf("round %d (%s): the lease not served through %s by a ready operator within 60s (ready: %d): %v",
				round, signal, env.DiscoveryURL, now, err)
		}
		t.Logf("%s of the leader (pid %d): the lease served again through the same address %s later, by operator %d",
			signal, pid, time.Since(sent).Round(100*time.Millisecond), now)
		awaitNewPID(t, env.Operators[l], pid, env.Operators[l].HealthProbeURL+"/healthz", 60*time.Second)
	}
}

// startEnv starts a dev environment of opts in a temporary directory, on
// free ports, stopped (and its pid files checked gone) at the end of the
// test; its logs are dumped if the test failed.
func startEnv(t *testing.T, opts devenv.Options) *devenv.Env {
	t.Helper()
	opts.Dir, opts.Ports, opts.Progress = t.TempDir(), devenv.Ports{}, testWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := devenv.Start(ctx, opts)
	if err != nil {
		dumpLogs(t, opts.Dir)
		t.Fatalf("starting the dev environment: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, opts.Dir)
		}
		if err := env.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		for _, o := range env.Operators {
			if _, err := os.Stat(o.PIDFile); !os.IsNotExist(err) {
				t.Errorf("%s still present after Stop", o.PIDFile)
			}
		}
	})
	return env
}

// poolFromZero: the sample ProxyPool (Squid pods, autoscaling from zero)
// grows when a lease request waits for one of its proxies, grants it once the
// pod's squid answers probes, keeps it while leased, and shrinks back to
// zero after its scale-down delay once released.
func (h *harness) poolFromZero(t *testing.T) {
	ctx := context.Background()
	count := func() string {
		return strings.TrimSpace(h.mustKubectl(t, "get", "proxies", "-l", "crawl.example.com/pool=burst", "-o", "name"))
	}
	if got := count(); got != "" {
		t.Fatalf("the sample pool has proxies before any demand: %q", got)
	}
	c := leaseClient(t, h.env, "")
	began := time.Now()
	l, err := c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"pool": "burst"}, Target: "origin", TTLSeconds: 300, WaitSeconds: 120})
	if err != nil {
		t.Fatalf("a waiting lease on the empty pool: %v", err)
	}
	t.Logf("granted %s after %s: the pool grew from zero and the pod turned Ready", l.Proxy.Name, time.Since(began).Round(100*time.Millisecond))
	out, err := exec.Command("curl", "-sS", "--max-time", "10", "-x", l.Proxy.URL, h.env.OriginURL+"/via-pool").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GET /via-pool") {
		t.Errorf("curl -x %s: %v %q", l.Proxy.URL, err, out)
	}
	status := h.mustKubectl(t, "get", "proxypool", "burst", "-o", "jsonpath={.status.replicas} {.status.leasedReplicas} {.status.desiredReason}")
	if status != "1 1 Demand" {
		t.Errorf("pool status (replicas leased reason) %q, want \"1 1 Demand\"", status)
	}
	h.mustKubectl(t, "patch", "proxypool", "burst", "--type=merge", "-p", `{"spec":{"autoscaling":{"scaleDownDelaySeconds":2}}}`)
	time.Sleep(4 * time.Second)
	if got := count(); got == "" {
		t.Fatal("the pool shrank while its proxy was leased")
	}
	if _, err := c.Renew(ctx, l.LeaseID, time.Minute); err != nil {
		t.Errorf("the lease broke while the pool held: %v", err)
	}
	if err := c.Release(ctx, l.LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return count() == "", nil
	}); err != nil {
		t.Errorf("the idle pool did not shrink back to zero: %q", count())
	}
	h.mustKubectl(t, "patch", "proxypool", "burst", "--type=merge", "-p", `{"spec":{"autoscaling":{"scaleDownDelaySeconds":60}}}`)
}

// kubectlScale: a fixed-size pool of Squid pods, created with kubectl,
// turns Ready and follows `kubectl scale` up and down; a template change
// rolls it, draining the leased old pod with its lease intact; a labelled
// Proxy without an owner is adopted.
func (h *harness) kubectlScale(t *testing.T) {
	ctx := context.Background()
	apply := func(tier string) {
		h.mustKubectlIn(t, `{"apiVersion":"crawl.example.com/v1alpha1","kind":"ProxyPool","metadata":{"name":"fixed"},
		"spec":{"replicas":1,"template":{"spec":{"provider":"kubernetes","attributes":{"pool":"fixed","tier":"`+tier+`"},
		"healthCheck":{"url":"`+h.env.OriginURL+`/"}}}}}`, "apply", "-f", "-")
	}
	at := func(what, jsonpath, want string) {
		t.Helper()
		var out string
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
			var err error
			out, err = h.runKubectl("", "get", "proxypool", "fixed", "-o", "jsonpath="+jsonpath)
			return err == nil && out == want, nil
		}); err != nil {
			t.Fatalf("%s: %q, want %q\n%s", what, out, want, h.mustKubectl(t, "get", "proxies", "-l", "crawl.example.com/pool=fixed", "-o", "wide"))
		}
	}
	apply("a")
	at("created", "{.status.replicas}/{.status.readyReplicas}", "1/1")
	h.mustKubectl(t, "scale", "proxypool", "fixed", "--replicas=2")
	at("scaled up", "{.status.replicas}/{.status.readyReplicas}", "2/2")

	// Roll with one pod leased: it drains (lease intact) instead of going.
	c := leaseClient(t, h.env, "")
	l, err := c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"pool": "fixed"}, TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	h.mustKubectl(t, "patch", "proxypool", "fixed", "--type=merge", "-p", `{"spec":{"template":{"spec":{"attributes":{"pool":"fixed","tier":"b"}}}}}`)
	var drained string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		got, err := c.Get(ctx, l.LeaseID)
		if err != nil {
			return false, err
		}
		drained = strings.TrimSpace(h.mustKubectl(t, "get", "proxies", "-l", "crawl.example.com/pool=fixed", "-o",
			`jsonpath={range .items[?(@.spec.attributes.tier=="a")]}{.metadata.name}{"\n"}{end}`))
		newReady := strings.TrimSpace(h.mustKubectl(t, "get", "proxies", "-l", "crawl.example.com/pool=fixed", "-o",
			`jsonpath={range .items[?(@.status.phase=="Ready")]}{.spec.attributes.tier}{"\n"}{end}`))
		// Two new pods Ready, and of the old ones only the leased one left.
		return got.ProxyDraining && strings.Count(newReady, "b") == 2 && drained == got.Proxy.Name, nil
	}); err != nil {
		t.Fatalf("the roll with a leased old pod: %v (old left: %q)", err, drained)
	}
	if _, err := c.Renew(ctx, l.LeaseID, time.Minute); err != nil {
		t.Errorf("renew of the lease on the draining pod: %v", err)
	}
	if err := c.Release(ctx, l.LeaseID); err != nil {
		t.Fatal(err)
	}
	at("rolled", "{.status.replicas}/{.status.readyReplicas}/{.status.drainingReplicas}", "2/2/0")

	// A labelled Proxy without an owner joins the pool.
	h.mustKubectlIn(t, `{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":{"name":"stray","labels":{"crawl.example.com/pool":"fixed"}},
		"spec":{"provider":"kubernetes","attributes":{"pool":"fixed","tier":"b"},"healthCheck":{"url":"`+h.env.OriginURL+`/"}}}`, "apply", "-f", "-")
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		out, err := h.runKubectl("", "get", "proxy", "stray", "-o", "jsonpath={.metadata.ownerReferences[0].name}")
		return err == nil && out == "fixed", nil
	}); err != nil {
		t.Errorf("the labelled Proxy was not adopted: %v", err)
	}
	h.mustKubectl(t, "scale", "proxypool", "fixed", "--replicas=0")
	at("scaled down", "{.status.replicas}", "0")
	h.mustKubectl(t, "delete", "proxypool", "fixed")
}
