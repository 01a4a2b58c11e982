package health

import (
	"bufio"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
	"github.com/proxy-operator/proxy-operator/pkg/health/healthtest"
)

// The fleet benchmark probes HEALTH_BENCH_PROXIES (default 2000) in-process
// Go forward proxies on loopback, each every HEALTH_BENCH_INTERVAL (default
// 10s), with the production engine settings (8 workers, 1s tick) and the real
// HTTPProber. The proxies and origins run in a child process (this test
// binary re-executed as TestFleetHelperProcess), so the getrusage CPU of this
// process is the engine's and its probes' own: the client side of every
// probe, tick bookkeeping and event handling. One benchmark iteration is one
// probe interval, measured after one interval of warm-up (the never-probed
// fleet's first probes and their spread). HEALTH_BENCH_WORKERS overrides the
// worker count and HEALTH_BENCH_ORIGIN_DELAY_MS makes the origin answer after
// a delay, standing in for a remote target's round trip.
//
//	go test ./pkg/health -run '^$' -bench BenchmarkFleet -benchtime 6x -timeout 30m
const (
	envHelper        = "HEALTH_FLEET_HELPER"
	envProxies       = "HEALTH_BENCH_PROXIES"
	envInterval      = "HEALTH_BENCH_INTERVAL"
	envWorkers       = "HEALTH_BENCH_WORKERS"
	envDelayMs       = "HEALTH_BENCH_ORIGIN_DELAY_MS"
	defaultProxies   = 2000
	defaultIntervalS = 10
)

func BenchmarkFleet(b *testing.B) {
	b.Run("http", func(b *testing.B) { benchFleet(b, false) })
	b.Run("https-connect", func(b *testing.B) { benchFleet(b, true) })
}

func benchFleet(b *testing.B, https bool) {
	n := envInt(b, envProxies, defaultProxies)
	intervalS := envInt(b, envInterval, defaultIntervalS)
	workers := envInt(b, envWorkers, DefaultWorkers)
	delayMs := envInt(b, envDelayMs, -1)
	interval := time.Duration(intervalS) * time.Second
	fl := startFleet(b, n)

	path := "/"
	if delayMs > 0 {
		path = fmt.Sprintf("/delay?ms=%d", delayMs)
	}
	url, tlsSpec := fl.plainURL+path, (*crawlv1alpha1.HealthCheckTLS)(nil)
	if https {
		url, tlsSpec = fl.tlsURL+path, &crawlv1alpha1.HealthCheckTLS{CABundle: fl.caPEM}
	}
	reader := &fakeReader{}
	proxies := make([]*crawlv1alpha1.Proxy, n)
	for i, addr := range fl.proxyAddrs {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		proxies[i] = &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("p%05d", i), UID: types.UID(fmt.Sprint("uid-", i))},
			Spec: crawlv1alpha1.ProxySpec{
				Mode:     crawlv1alpha1.ModeExternal,
				Endpoint: &crawlv1alpha1.Endpoint{Host: host, Port: int32(p)},
				HealthCheck: crawlv1alpha1.HealthCheck{
					URL: url, IntervalSeconds: int32(intervalS), TimeoutSeconds: 5, TLS: tlsSpec,
				}.WithDefaults(),
			},
			Status: crawlv1alpha1.ProxyStatus{IP: host},
		}
	}
	reader.set(proxies...)

	rec := &recordingProber{next: NewHTTPProber(nil, dialpolicy.Denylist{}), last: map[types.NamespacedName]time.Time{}}
	e, err := New(Options{Workers: workers, Clock: clock.RealClock{}, Reader: reader, Prober: rec})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logr.Discard()))
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Start(ctx) })
	wg.Go(func() { // the reconciler's side of the channel
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.Events():
			}
		}
	})
	defer func() {
		cancel()
		wg.Wait()
	}()

	// Warm-up: the first probes (all at once) and the spread second ones,
	// until both rounds are done (bounded: a pool too small never catches up).
	time.Sleep(interval + 2*time.Second)
	for deadline := time.Now().Add(4 * interval); e.Stats().Probes < uint64(2*n) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	rec.startMeasuring(interval)
	st0, cpu0, child0, t0 := e.Stats(), rusageCPU(b), procCPU(fl.pid), time.Now()
	b.ResetTimer()
	for range b.N {
		time.Sleep(interval)
	}
	b.StopTimer()
	st1, cpu1, child1, wall := e.Stats(), rusageCPU(b), procCPU(fl.pid), time.Since(t0)

	probes := float64(st1.Probes - st0.Probes)
	if probes == 0 {
		b.Fatal("no probes")
	}
	m := rec.stop()
	cpu := (cpu1 - cpu0).Seconds()
	b.ReportMetric(probes/wall.Seconds(), "probes/s")
	b.ReportMetric(float64(n)/interval.Seconds(), "target-probes/s")
	b.ReportMetric(cpu/probes*1e6, "cpu-µs/probe")
	b.ReportMetric(cpu/wall.Seconds(), "engine-cores")
	b.ReportMetric((child1-child0).Seconds()/wall.Seconds(), "fleet-cores")
	b.ReportMetric(float64(st1.Failures-st0.Failures), "failures")
	b.ReportMetric(float64(m.missed), "missed-intervals")
	b.ReportMetric(float64(st1.Missed-st0.Missed), "engine-missed")
	b.ReportMetric(float64(m.late), "late-probes")
	b.ReportMetric(m.maxGap.Seconds(), "max-gap-s")
	b.ReportMetric(m.p99.Seconds()*1e3, "p99-probe-ms")
	b.ReportMetric(float64(st1.EventsDropped-st0.EventsDropped), "dropped-events")
	b.ReportMetric(float64(st1.Saturated-st0.Saturated), "saturated-ticks")
	b.ReportMetric(float64(workers), "workers")
}

// recordingProber wraps the real prober and measures, per proxy, the gap
// between the starts of two consecutive probes.
type recordingProber struct {
	next Prober

	mu        sync.Mutex
	measuring bool
	interval  time.Duration
	last      map[types.NamespacedName]time.Time
	gaps      []time.Duration
	latencies []time.Duration
}

var _ Prober = (*recordingProber)(nil)

func (r *recordingProber) Probe(ctx context.Context, t Target) (time.Duration, error) {
	now := time.Now()
	r.mu.Lock()
	if prev, ok := r.last[t.Key]; ok && r.measuring {
		r.gaps = append(r.gaps, now.Sub(prev))
	}
	r.last[t.Key] = now
	r.mu.Unlock()
	d, err := r.next.Probe(ctx, t)
	r.mu.Lock()
	if r.measuring {
		r.latencies = append(r.latencies, d)
	}
	r.mu.Unlock()
	return d, err
}

func (r *recordingProber) startMeasuring(interval time.Duration) {
	r.mu.Lock()
	r.measuring, r.interval = true, interval
	r.mu.Unlock()
}

type gapStats struct {
	missed, late int
	maxGap, p99  time.Duration
}

// stop ends the measurement: a gap of two intervals or more is a missed
// interval; one longer than interval + 1s (one tick) is a late probe. Gaps
// still open at the end count too, so a starved proxy is not invisible.
func (r *recordingProber) stop() gapStats {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.measuring = false
	var s gapStats
	gaps := r.gaps
	for _, at := range r.last {
		if g := now.Sub(at); g > r.interval+DefaultTick {
			gaps = append(gaps, g)
		}
	}
	for _, g := range gaps {
		s.maxGap = max(s.maxGap, g)
		if g >= 2*r.interval {
			s.missed++
		}
		if g > r.interval+DefaultTick {
			s.late++
		}
	}
	if len(r.latencies) > 0 {
		slices.Sort(r.latencies)
		s.p99 = r.latencies[len(r.latencies)*99/100]
	}
	return s
}

// fleet is the child process serving the forward proxies and the origins.
type fleet struct {
	pid              int
	plainURL, tlsURL string
	caPEM            string
	proxyAddrs       []string
}

func startFleet(b *testing.B, n int) *fleet {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFleetHelperProcess$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), envHelper+"=1", fmt.Sprintf("%s=%d", envProxies, n))
	cmd.Stderr = os.Stderr
	// The child dies with us, and exits when we close its stdin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	fl := &fleet{pid: cmd.Process.Pid}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 2)
		switch f[0] {
		case "PLAIN":
			fl.plainURL = f[1]
		case "TLS":
			fl.tlsURL = f[1]
		case "CA":
			fl.caPEM = strings.ReplaceAll(f[1], `\n`, "\n")
		case "PROXY":
			fl.proxyAddrs = append(fl.proxyAddrs, f[1])
		case "READY":
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			if len(fl.proxyAddrs) != n {
				b.Fatalf("fleet started %d of %d proxies", len(fl.proxyAddrs), n)
			}
			return fl
		}
	}
	b.Fatalf("fleet helper exited before READY: %v", sc.Err())
	return nil
}

// TestFleetHelperProcess is the benchmark's child process, not a test: it
// serves the fleet until its stdin closes.
func TestFleetHelperProcess(t *testing.T) {
	if os.Getenv(envHelper) != "1" {
		t.Skip("helper process of BenchmarkFleet")
	}
	n := envInt(t, envProxies, defaultProxies)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ms, err := strconv.Atoi(r.URL.Query().Get("ms")); err == nil && ms > 0 && ms <= 10000 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	plain, tlsSrv := httptest.NewServer(ok), httptest.NewUnstartedServer(ok)
	// A probe cut off at shutdown logs a handshake EOF; failures that
	// matter are counted by the engine.
	tlsSrv.Config.ErrorLog = stdlog.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	defer plain.Close()
	defer tlsSrv.Close()
	g, err := healthtest.NewForwardProxyGroup("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	w := bufio.NewWriter(os.Stdout)
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}))
	fmt.Fprintf(w, "PLAIN %s\nTLS %s\nCA %s\n", plain.URL, tlsSrv.URL, strings.ReplaceAll(ca, "\n", `\n`))
	for _, p := range g.Proxies() {
		fmt.Fprintf(w, "PROXY %s\n", p.Addr)
	}
	fmt.Fprintln(w, "READY")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it or dies
}

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// rusageCPU is this process's user+system CPU time.
func rusageCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is another process's user+system CPU time from /proc (0 when
// unreadable), assuming the usual 100 clock ticks per second.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100)
}
