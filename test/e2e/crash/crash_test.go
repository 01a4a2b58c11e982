package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/gcefake"

	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/logtail"
)

const (
	fleetSize = 20
	// gcMinAge is short so that orphans of the crash are collected within
	// the run; gcInterval makes a sweep follow quickly.
	gcMinAge   = 3 * time.Second
	gcInterval = 2 * time.Second
	// faultFraction of every Compute Engine call fails with a 503.
	faultFraction = 0.2
	settleTimeout = 3 * time.Minute
)

var zones = []string{"us-central1-a", "europe-west1-b"}

// counts is what one run found once the fleet settled and a sweep completed.
type counts struct {
	Seed       uint64
	KillAfter  time.Duration // after the workload started
	Live       int           // Proxies left
	Instances  int           // the fake's instances of the run's tag
	Leaked     int           // instances no live Proxy owns
	Duplicates int           // extra instances of a live Proxy
	Missing    int           // live Proxies without their instance
	GCDeleted  int           // orphans the restarted process's collector deleted
	Ops        int           // edits and deletes the workload made
}

func (c counts) ok() bool { return c.Leaked == 0 && c.Duplicates == 0 && c.Missing == 0 }

func (c counts) String() string {
	return fmt.Sprintf("seed=%d kill=%s live=%d instances=%d leaked=%d duplicates=%d missing=%d gcDeleted=%d ops=%d",
		c.Seed, c.KillAfter.Round(time.Millisecond), c.Live, c.Instances, c.Leaked, c.Duplicates, c.Missing, c.GCDeleted, c.Ops)
}

func TestCrashRestart(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CRASH_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CRASH_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("CRASH_SEED=%d repeats this run", seed)
	c := crashRun(t, 0, seed)
	t.Log(c)
	if !c.ok() {
		t.Errorf("after the crash and a sweep: %s", c)
	}
}

// BenchmarkCrashRestart runs b.N random kill points (use -benchtime Nx) and
// prints every run's counts; any leak, duplicate or missing instance fails it.
func BenchmarkCrashRestart(b *testing.B) {
	var all []counts
	i := 0
	for b.Loop() {
		seed := uint64(time.Now().UnixNano()) + uint64(i)
		c := crashRun(b, i+1, seed)
		b.Logf("run %d: %s", i+1, c)
		all = append(all, c)
		i++
	}
	var leaked, dup, missing, gcDeleted int
	for _, c := range all {
		leaked += c.Leaked
		dup += c.Duplicates
		missing += c.Missing
		gcDeleted += c.GCDeleted
	}
	b.ReportMetric(float64(leaked), "leaked")
	b.ReportMetric(float64(dup), "duplicates")
	b.ReportMetric(float64(missing), "missing")
	b.ReportMetric(float64(gcDeleted), "gc-deleted")
	b.Logf("%d runs: leaked=%d duplicates=%d missing=%d (orphans collected: %d)", len(all), leaked, dup, missing, gcDeleted)
	if leaked+dup+missing > 0 {
		b.Errorf("%d leaked, %d duplicate and %d missing instances over %d runs", leaked, dup, missing, len(all))
	}
}

// plantOrphan leaves in the fake what a crash after an insert and before
// its Proxy was deleted leaves: an old instance of the run's tag whose owner
// is gone. Every run starts with one, so every run proves the collector of
// the real process deletes what no Proxy owns.
func plantOrphan(t testing.TB, tag string) {
	t.Helper()
	labels := map[string]string{gcp.LabelTag: tag, gcp.LabelOwnerUID: "uid-of-a-proxy-gone-before-the-run"}
	if err := shared.fake.Plant(project, zones[0], "proxy-planted-"+tag, labels, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// crashRun is one run: its own namespace and instance tag, so runs do not
// see each other's instances.
func crashRun(t testing.TB, run int, seed uint64) counts {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, seed^0x5deece66d))
	res := counts{Seed: seed}
	tag := fmt.Sprintf("crash-%d-%d", run, seed%100000)
	ns := tag
	c := shared.client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	plantOrphan(t, tag)
	shared.fake.ClearFaults()
	shared.fake.RandomFailures("", faultFraction, http.StatusServiceUnavailable, "backendError", seed)
	defer shared.fake.ClearFaults()

	ports, err := ports.Free(2)
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, probePort := ports[0], ports[1]
	logPath := filepath.Join(shared.dir, tag+".log")
	args := operatorArgs(tag, metricsPort, probePort, gcInterval)
	op := mustStart(t, logPath, args, probePort)
	defer func() {
		if t.Failed() {
			t.Logf("--- operator log tail (%s) ---\n%s", logPath, logtail.File(logPath, 60))
		}
	}()

	// The workload, with the kill at a random moment of it.
	workload := 2*time.Second + time.Duration(fleetSize)*150*time.Millisecond
	res.KillAfter = time.Duration(rng.Int64N(int64(workload)))
	killed := make(chan struct{})
	killTimer := time.AfterFunc(res.KillAfter, func() { op.Kill(); close(killed) })
	res.Ops = runWorkload(t, ctx, rng, ns)
	<-killed
	killTimer.Stop()

	// The restart: a fresh process, as a kubelet would start.
	op = mustStart(t, logPath, args, probePort)
	defer cleanUp(t, ns, op)

	settledAt, err := waitSettled(ctx, c, ns, op)
	if err != nil {
		t.Fatalf("fleet did not settle after the restart: %v", err)
	}
	// One complete sweep that began after every orphan was old enough.
	if err := waitCompleteSweepAfter(ctx, metricsPort, settledAt.Add(gcMinAge), op); err != nil {
		t.Fatalf("no complete orphan sweep: %v", err)
	}
	res.GCDeleted = int(scrapeSum(t, metricsPort, "proxy_operator_gc_deleted_total"))
	fillCounts(t, ctx, c, ns, tag, &res)
	// The planted orphan is gone (fillCounts counts it as leaked if not):
	// deleted by the first process's collector if it lived past its first
	// sweep, by the restarted one's otherwise.
	return res
}

func mustStart(t testing.TB, logPath string, args []string, probePort int) *framework.OperatorProcess {
	t.Helper()
	op, err := framework.StartOperatorProcess(shared.binary, logPath, args)
	if err != nil {
		t.Fatal(err)
	}
	// Ready: caches synced, so the workload races a running reconciler.
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return op
			}
		}
		if op.Exited() {
			t.Fatalf("operator exited while starting (%v):\n%s", op.Err(), logtail.File(logPath, 40))
		}
		if time.Now().After(deadline) {
			op.Kill()
			t.Fatalf("operator not ready within 60s:\n%s", logtail.File(logPath, 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newProxy(ns, name, zone, machineType string) *crawlv1alpha1.Proxy {
	return builders.Proxy(ns, name).GCP(zone, machineType).Probe("http://127.0.0.1:9/", 5, 1).Obj()
}

// runWorkload creates fleetSize Proxies, then edits (machine type: a
// replacement), deletes and creates Proxies at random for about the workload
// time. It returns how many edits and deletes it made. The zone of a Proxy is
// never edited: see the package note on zone edits in docs/gc.md.
func runWorkload(t testing.TB, ctx context.Context, rng *rand.Rand, ns string) int {
	t.Helper()
	c := shared.client
	names := []string{}
	next := 0
	create := func() {
		name := fmt.Sprintf("p-%02d", next)
		next++
		if err := c.Create(ctx, newProxy(ns, name, zones[rng.IntN(len(zones))], "e2-small")); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		names = append(names, name)
	}
	for range fleetSize {
		create()
	}
	ops := 0
	for range 2 * fleetSize {
		time.Sleep(time.Duration(25+rng.IntN(100)) * time.Millisecond)
		if len(names) == 0 {
			create()
			continue
		}
		i := rng.IntN(len(names))
		switch r := rng.IntN(4); {
		case r < 2: // edit: a new machine type replaces the instance
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var p crawlv1alpha1.Proxy
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: names[i]}, &p); err != nil {
					return err
				}
				if p.Spec.GCP.MachineType == "e2-small" {
					p.Spec.GCP.MachineType = "e2-medium"
				} else {
					p.Spec.GCP.MachineType = "e2-small"
				}
				return c.Update(ctx, &p)
			})
			if err != nil {
				t.Fatalf("editing %s: %v", names[i], err)
			}
		case r == 2: // delete
			p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]}}
			if err := c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("deleting %s: %v", names[i], err)
			}
			names = append(names[:i], names[i+1:]...)
		default:
			create()
			continue
		}
		ops++
	}
	return ops
}

// waitSettled waits until every Proxy of ns is gone or not deleting, has its
// instance recorded and running, and its spec is observed; it returns when.
func waitSettled(ctx context.Context, c client.Client, ns string, op *framework.OperatorProcess) (time.Time, error) {
	deadline := time.Now().Add(settleTimeout)
	var why string
	for time.Now().Before(deadline) {
		if op.Exited() {
			return time.Time{}, fmt.Errorf("the restarted operator exited: %v", op.Err())
		}
		why = unsettled(ctx, c, ns)
		if why == "" {
			return time.Now(), nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("after %s: %s", settleTimeout, why)
}

// unsettled names one reason the fleet is not settled, "" if it is.
func unsettled(ctx context.Context, c client.Client, ns string) string {
	var l crawlv1alpha1.ProxyList
	if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	running := map[string]gcefake.InstanceInfo{}
	for _, in := range shared.fake.Instances() {
		running[gcp.ProviderID(project, in.Project, in.Zone, in.Name)] = in
	}
	for _, p := range l.Items {
		switch {
		case p.DeletionTimestamp != nil:
			return p.Name + " is still being deleted"
		case p.Status.ObservedGeneration != p.Generation:
			return p.Name + " has an unobserved generation"
		case p.Status.ProviderID == "":
			return p.Name + " has no instance recorded"
		case p.Status.Phase != crawlv1alpha1.PhaseReady && p.Status.Phase != crawlv1alpha1.PhaseUnhealthy:
			return fmt.Sprintf("%s is %s", p.Name, p.Status.Phase)
		}
		in, ok := running[p.Status.ProviderID]
		switch {
		case !ok:
			return fmt.Sprintf("%s's instance %s is not in the fake", p.Name, p.Status.ProviderID)
		case in.Status != gcefake.StatusRunning:
			return fmt.Sprintf("%s's instance is %s", p.Name, in.Status)
		case !strings.HasSuffix(in.MachineType, "/"+p.Spec.GCP.MachineType):
			return fmt.Sprintf("%s's instance is still a %s", p.Name, in.MachineType)
		}
	}
	return ""
}

// waitCompleteSweepAfter waits for the operator to report a complete orphan
// sweep that ended after t.
func waitCompleteSweepAfter(ctx context.Context, port int, t time.Time, op *framework.OperatorProcess) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if op.Exited() {
			return fmt.Errorf("the operator exited: %v", op.Err())
		}
		fams, err := scrape(ctx, port)
		if err == nil {
			if f := fams["proxy_operator_gc_last_complete_sweep_timestamp_seconds"]; f != nil && len(f.GetMetric()) == 1 {
				at := f.GetMetric()[0].GetGauge().GetValue()
				if at > float64(t.UnixNano())/1e9 {
					return nil
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("none ended after %s within 2m", t.Format(time.RFC3339Nano))
}

// fillCounts compares the fake's instances of tag with the live Proxies.
func fillCounts(t testing.TB, ctx context.Context, c client.Client, ns, tag string, res *counts) {
	t.Helper()
	var l crawlv1alpha1.ProxyList
	if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // instance name → zone
	for _, p := range l.Items {
		want[provider.NameFromUID(p.UID)] = p.Spec.GCP.Zone
	}
	res.Live = len(want)
	seen := map[string]int{}
	for _, in := range shared.fake.Instances() {
		if in.Labels[gcp.LabelTag] != tag || in.Status == gcefake.StatusStopping {
			continue // another run's, or deleted and on its way out
		}
		res.Instances++
		zone, live := want[in.Name]
		switch {
		case !live:
			res.Leaked++
			t.Logf("leaked: %s/%s (owner %s)", in.Zone, in.Name, in.Labels[gcp.LabelOwnerUID])
		case zone != in.Zone:
			res.Duplicates++
			t.Logf("stray: %s/%s, its Proxy is in %s", in.Zone, in.Name, zone)
		default:
			seen[in.Name]++
			if seen[in.Name] > 1 {
				res.Duplicates++
			}
		}
	}
	for name := range want {
		if seen[name] == 0 {
			res.Missing++
			t.Logf("missing: the instance %s of a live Proxy", name)
		}
	}
}

// cleanUp leaves nothing of a run: its Proxies deleted while the operator
// runs (so their instances go too), then the operator and the namespace.
func cleanUp(t testing.TB, ns string, op *framework.OperatorProcess) {
	ctx := context.Background()
	if err := deleteAll(ctx, shared.client, ns); err != nil {
		t.Errorf("cleaning up: %v", err)
	}
	if err := op.Stop(20 * time.Second); err != nil {
		t.Error(err)
	}
	_ = shared.client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
}

func deleteAll(ctx context.Context, c client.Client, ns string) error {
	if err := c.DeleteAllOf(ctx, &crawlv1alpha1.Proxy{}, client.InNamespace(ns)); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var l crawlv1alpha1.ProxyList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(l.Items) == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the Proxies of %s were not deleted within a minute", ns)
}

func scrape(ctx context.Context, port int) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

func scrapeSum(t testing.TB, port int, name string) float64 {
	t.Helper()
	fams, err := scrape(context.Background(), port)
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	var sum float64
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// operatorArgs are the flags of a run's operator: the gcp provider on the
// fake, short polls, and the collector every interval (0 disables it).
func operatorArgs(tag string, metricsPort, probePort int, interval time.Duration) []string {
	return []string{
		"--kubeconfig=" + shared.cp.KubeconfigPath,
		// Its proxy auth key's Secret: the VMs check lease credentials.
		"--namespace=default",
		"--providers=gcp", "--gcp-project=" + project, "--gcp-endpoint=" + shared.endpoint, "--gcp-request-timeout=5s",
		"--instance-tag=" + tag,
		"--gc-interval=" + interval.String(), "--gc-min-age=" + gcMinAge.String(),
		"--provisioning-poll-interval=200ms", "--deletion-poll-interval=200ms", "--requeue-now-interval=50ms",
		"--drift-poll-interval=2s", "--create-retry-interval=1s", "--quota-retry-interval=3s",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probePort),
		"--discovery-bind-address=0", "--apiserver-secure-port=0",
	}
}

// TestCheckCatchesALeakWithoutTheCollector is the negative control of
// TestCrashRestart: with the collector disabled, the planted orphan
// survives and the same counting reports it. A check that could not see a
// leak would pass here.
func TestCheckCatchesALeakWithoutTheCollector(t *testing.T) {
	ctx := context.Background()
	tag := fmt.Sprintf("nogc-%d", time.Now().UnixNano()%100000)
	ns := tag
	c := shared.client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	plantOrphan(t, tag)
	ports, err := ports.Free(2)
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, probePort := ports[0], ports[1]
	logPath := filepath.Join(shared.dir, tag+".log")
	op := mustStart(t, logPath, operatorArgs(tag, metricsPort, probePort, 0), probePort)
	defer cleanUp(t, ns, op)
	for i := range 3 {
		if err := c.Create(ctx, newProxy(ns, fmt.Sprintf("p-%d", i), zones[i%2], "e2-small")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := waitSettled(ctx, c, ns, op); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gcMinAge + gcInterval) // what a collector would have needed
	var res counts
	fillCounts(t, ctx, c, ns, tag, &res)
	if res.Leaked != 1 || res.Missing != 0 || res.Duplicates != 0 || res.Live != 3 {
		t.Errorf("without the collector: %s; want exactly the planted orphan leaked", res)
	}
}
