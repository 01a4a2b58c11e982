package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// fleetSize is E2E_FLEET_SIZE, default 100.
func fleetSize(b *testing.B) int {
	v := os.Getenv("E2E_FLEET_SIZE")
	if v == "" {
		return 100
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 250 {
		b.Fatalf("E2E_FLEET_SIZE=%q: want 1..250 (the agent's pool has 253 addresses)", v)
	}
	return n
}

// steadyWindow is how long steady-state API writes are counted.
func steadyWindow() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("E2E_STEADY_WINDOW")); err == nil && d > 0 {
		return d
	}
	return 30 * time.Second
}

// BenchmarkFleetProvisioning applies a fleet of Proxies at once and measures
// the time until all are Provisioned (real squid behind each, via the node
// agent), then API writes per reconcile at steady state, then the time until
// the deleted fleet is gone.
func BenchmarkFleetProvisioning(b *testing.B) {
	n := fleetSize(b)
	ctx := context.Background()
	for iter := range b.N {
		b.StopTimer()
		ns := fmt.Sprintf("fleet-%d", iter)
		if err := ensureNamespace(ctx, shared.client, ns); err != nil {
			b.Fatal(err)
		}
		proxies := make([]*crawlv1alpha1.Proxy, n)
		for i := range proxies {
			proxies[i] = newProxy(ns, fmt.Sprintf("proxy-%03d", i), nil)
			proxies[i].Spec.HealthCheck.IntervalSeconds = 5
		}

		b.StartTimer()
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		for _, p := range proxies {
			g.Go(func() error { return shared.client.Create(gctx, p) })
		}
		if err := g.Wait(); err != nil {
			b.Fatalf("applying the fleet: %v", err)
		}
		applied := time.Since(start)
		perProxy, err := waitFleet(ctx, ns, n, start, provisioned)
		if err != nil {
			b.Fatal(err)
		}
		total := time.Since(start)
		b.StopTimer()

		sort.Slice(perProxy, func(i, j int) bool { return perProxy[i] < perProxy[j] })
		rss := squidRSSMiB()
		b.Logf("fleet of %d: applied in %v, all Provisioned after %v (per proxy p50 %v, p90 %v, max %v); squid RSS %.0f MiB total",
			n, applied.Round(time.Millisecond), total.Round(time.Millisecond),
			perProxy[len(perProxy)/2].Round(time.Millisecond), perProxy[len(perProxy)*9/10].Round(time.Millisecond),
			perProxy[len(perProxy)-1].Round(time.Millisecond), rss)
		b.ReportMetric(total.Seconds(), "s-all-provisioned")
		b.ReportMetric(perProxy[len(perProxy)/2].Seconds(), "s-p50-provisioned")
		b.ReportMetric(rss/float64(n), "MiB-rss/squid")

		// Steady state: wait until every Proxy is Ready, let the last
		// transitions settle, then count writes and reconciles.
		if _, err := waitFleet(ctx, ns, n, time.Now(), func(p *crawlv1alpha1.Proxy) bool {
			return p.Status.Phase == crawlv1alpha1.PhaseReady
		}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		writes, reconciles, err := steadyState(ctx, steadyWindow())
		if err != nil {
			b.Fatal(err)
		}
		perReconcile := 0.0
		if reconciles > 0 {
			perReconcile = float64(writes) / float64(reconciles)
		}
		b.Logf("steady state over %v: %d API writes (proxies, pods, events) in %d reconciles = %.3f writes/reconcile",
			steadyWindow(), writes, reconciles, perReconcile)
		b.ReportMetric(perReconcile, "writes/reconcile")

		deleteStart := time.Now()
		if err := shared.client.DeleteAllOf(ctx, &crawlv1alpha1.Proxy{}, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		if err := waitFleetGone(ctx, ns); err != nil {
			b.Fatal(err)
		}
		b.Logf("fleet deleted (pods and squids gone, objects removed) in %v", time.Since(deleteStart).Round(time.Millisecond))
		b.ReportMetric(time.Since(deleteStart).Seconds(), "s-all-deleted")
	}
}

// waitFleet polls the namespace's Proxies until n satisfy cond, returning
// each one's time since start when first seen satisfying it.
func waitFleet(ctx context.Context, ns string, n int, start time.Time, cond func(*crawlv1alpha1.Proxy) bool) ([]time.Duration, error) {
	seen := map[string]time.Duration{}
	deadline := time.Now().Add(10 * time.Minute)
	for len(seen) < n {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d Proxies reached the condition within 10m", len(seen), n)
		}
		var list crawlv1alpha1.ProxyList
		if err := shared.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		now := time.Since(start)
		for i := range list.Items {
			if _, ok := seen[list.Items[i].Name]; !ok && cond(&list.Items[i]) {
				seen[list.Items[i].Name] = now
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := make([]time.Duration, 0, n)
	for _, d := range seen {
		out = append(out, d)
	}
	return out, nil
}

// waitFleetGone polls until the namespace holds no Proxies and no pods.
func waitFleetGone(ctx context.Context, ns string) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var proxies crawlv1alpha1.ProxyList
		var pods corev1.PodList
		if err := shared.client.List(ctx, &proxies, client.InNamespace(ns)); err != nil {
			return err
		}
		if err := shared.client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(proxies.Items) == 0 && len(pods.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d Proxies and %d pods left after 10m", len(proxies.Items), len(pods.Items))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// steadyState counts, over window, the API writes to proxies, pods and
// events (kube-apiserver's apiserver_request_total) and the operator's
// reconciles (controller-runtime's reconcile_total, in this process).
func steadyState(ctx context.Context, window time.Duration) (writes, reconciles int64, err error) {
	w0, err := apiWrites(ctx)
	if err != nil {
		return 0, 0, err
	}
	r0, err := reconcileTotal()
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(window)
	w1, err := apiWrites(ctx)
	if err != nil {
		return 0, 0, err
	}
	r1, err := reconcileTotal()
	if err != nil {
		return 0, 0, err
	}
	return w1 - w0, r1 - r0, nil
}

// apiWrites sums apiserver_request_total over write verbs on proxies, pods
// and events.
func apiWrites(ctx context.Context) (int64, error) {
	cs, err := kubernetes.NewForConfig(shared.cp.RESTConfig())
	if err != nil {
		return 0, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("scraping kube-apiserver metrics: %w", err)
	}
	var total int64
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		if !containsAny(line, `resource="proxies"`, `resource="pods"`, `resource="events"`) ||
			!containsAny(line, `verb="POST"`, `verb="PUT"`, `verb="PATCH"`, `verb="DELETE"`, `verb="APPLY"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %q: %w", line, err)
		}
		total += int64(v)
	}
	return total, sc.Err()
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// reconcileTotal sums controller_runtime_reconcile_total in this process.
func reconcileTotal() (int64, error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return int64(total), nil
}

// squidRSSMiB sums the resident memory of the agent's squids.
func squidRSSMiB() float64 {
	var kib int64
	for _, inst := range shared.agent.Instances() {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(inst.PID), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					n, _ := strconv.ParseInt(f[0], 10, 64)
					kib += n
				}
			}
		}
	}
	return float64(kib) / 1024
}
