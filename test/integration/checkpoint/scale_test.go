package checkpoint

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// The scale the operator is sized for.
const (
	scaleProxies   = 10000
	scaleLeases    = 100000
	scaleCooldowns = 100000
)

// scaleStore is a store as the operator builds it (signed IDs), fed
// scaleProxies proxies (each with the attributes a pool gives: zone, tier,
// country); filled adds scaleLeases leases from 20 holders over 1,000 sites
// and scaleCooldowns cooldowns (ten targets per proxy).
func scaleStore(b *testing.B, filled bool) *lease.Store {
	b.Helper()
	signer := leaseid.NewSigner()
	if err := signer.SetKey([]byte(strings.Repeat("k", leaseid.KeySize))); err != nil {
		b.Fatal(err)
	}
	s, err := lease.New(lease.Options{MaxLeasesPerProxy: 12, MaxTTL: 2 * time.Hour, CooldownWindow: time.Hour, IDs: signer}, clock.RealClock{})
	if err != nil {
		b.Fatal(err)
	}
	feedScaleProxies(s)
	if filled {
		fillScale(b, s)
	}
	return s
}

func feedScaleProxies(s *lease.Store) {
	for i := range scaleProxies {
		host := fmt.Sprintf("10.%d.%d.%d", i/62500, i/250%250, i%250+1)
		s.UpsertProxy(lease.ProxyInfo{Namespace: fmt.Sprintf("team-%d", i%4), Name: fmt.Sprintf("squid-%05d", i), URL: "http://" + host + ":3128",
			Host: host, Port: 3128, LatencyMillis: int64(i % 97), Healthy: true,
			Attributes: map[string]string{"zone": fmt.Sprintf("europe-west1-%c", 'b'+i%3), "tier": []string{"gold", "standard"}[i%2], "country": fmt.Sprintf("c%d", i%10)}})
	}
}

// fillLeases adds the leases and returns their IDs in ids (allocated by
// the caller, so that a heap measure can leave it out).
func fillLeases(b *testing.B, s *lease.Store, ids []string) []string {
	b.Helper()
	for i := range scaleLeases {
		h := fmt.Sprintf("system:serviceaccount:crawl:crawler-%d", i%20)
		l, err := s.Acquire(lease.AcquireRequest{Namespace: fmt.Sprintf("team-%d", i%4), Target: fmt.Sprintf("site-%d.example.com", i%1000),
			TTL: time.Hour, Holder: h, Flow: h})
		if err != nil {
			b.Fatalf("lease %d: %v", i, err)
		}
		ids = append(ids, l.ID)
	}
	return ids
}

func fillCooldowns(b *testing.B, s *lease.Store, ids []string) {
	b.Helper()
	for i := range scaleCooldowns {
		// Ten distinct targets on each proxy: lease i%scaleLeases sits on
		// proxy i%scaleProxies (the store spreads leases evenly).
		if err := s.Report(ids[i%len(ids)], lease.ResultRateLimited, fmt.Sprintf("cool-%d.example.com", i)); err != nil {
			b.Fatal(err)
		}
	}
}

func fillScale(b *testing.B, s *lease.Store) {
	b.Helper()
	fillCooldowns(b, s, fillLeases(b, s, make([]string, 0, scaleLeases)))
}

// heapNow is the live heap after a full collection.
func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rssBytes is this process's resident set size.
func rssBytes() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseFloat(f[1], 64)
	return pages * float64(os.Getpagesize())
}

// BenchmarkScaleMemory is the store's heap at the scale the operator is
// sized for: per proxy (beyond the Proxy informer's own copy, which this
// store does not hold), per live lease and per cooldown. Targets: ≤ 4 KiB
// per proxy, ≤ 512 B per lease. Run it alone (-benchtime 1x): each
// iteration builds a store.
//
//	go test ./test/integration/checkpoint -run '^$' -bench ScaleMemory -benchtime 1x -count 3
func BenchmarkScaleMemory(b *testing.B) {
	var perProxy, perLease, perCooldown, rss float64
	for b.Loop() {
		ids := make([]string, 0, scaleLeases) // the test's own: before h0
		h0 := heapNow()
		s := scaleStore(b, false)
		h1 := heapNow()
		ids = fillLeases(b, s, ids) // the IDs' bytes are the store's
		h2 := heapNow()
		fillCooldowns(b, s, ids)
		h3 := heapNow()
		perProxy = float64(int64(h1)-int64(h0)) / scaleProxies
		perLease = float64(int64(h2)-int64(h1)) / scaleLeases
		perCooldown = float64(int64(h3)-int64(h2)) / scaleCooldowns
		runtime.KeepAlive(ids)
		rss = rssBytes()
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perProxy, "heap-B/proxy")
	b.ReportMetric(perLease, "heap-B/lease")
	b.ReportMetric(perCooldown, "heap-B/cooldown")
	b.ReportMetric(rss/(1<<20), "process-RSS-MiB")
}

// scaleEnv is a control plane and one store at scale, checkpointed once.
type scaleEnv struct {
	kube  kubernetes.Interface
	store *lease.Store
	cp    *checkpoint.Checkpointer
	opts  checkpoint.Options
}

func newScaleEnv(b *testing.B) *scaleEnv {
	b.Helper()
	cp := controlplane.StartForTest(b, controlplane.Options{SkipCRDs: true})
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scale"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	e := &scaleEnv{kube: kube, store: scaleStore(b, true)}
	e.opts = checkpoint.DefaultOptions()
	e.opts.SecretName, e.opts.Namespace = "leases", "scale"
	if e.cp, err = checkpoint.New(e.opts, checkpoint.Deps{Secrets: kube.CoreV1(), Store: e.store, Codec: apiserver.MetadataCodec{}}); err != nil {
		b.Fatal(err)
	}
	if err := e.cp.WriteIfChanged(context.Background()); err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkScaleCheckpoint at 100,000 live leases over 10,000 proxies with
// 100,000 cooldowns: write is one checkpoint written (state copy, encode,
// the Secrets), with its size and shard count; takeover is a replica
// taking it over (fence, read, decode, restore into a store the informer
// has fed; the takeover grace is not waited: the checkpoint was written
// final).
//
//	go test ./test/integration/checkpoint -run '^$' -bench ScaleCheckpoint -benchtime 5x
func BenchmarkScaleCheckpoint(b *testing.B) {
	e := newScaleEnv(b)
	ctx := context.Background()
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			l, err := e.store.Acquire(lease.AcquireRequest{Target: "change", TTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			e.store.Release(l.ID)
			if err := e.cp.WriteIfChanged(ctx); err != nil {
				b.Fatal(err)
			}
		}
		list, err := e.kube.CoreV1().Secrets("scale").List(ctx, metav1.ListOptions{LabelSelector: componentLabel})
		if err != nil {
			b.Fatal(err)
		}
		size := 0
		for _, s := range list.Items {
			size += len(s.Data["checkpoint.json.gz"])
		}
		b.ReportMetric(float64(len(list.Items)), "secrets")
		b.ReportMetric(float64(size)/(1<<20), "MiB")
	})
	// The last write is final: a takeover does not wait for it.
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	e.store.Freeze()
	if err := e.cp.Start(runCtx); err != nil {
		b.Fatal(err)
	}
	b.Run("takeover", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			s := scaleStore(b, false)
			c, err := checkpoint.New(e.opts, checkpoint.Deps{Secrets: e.kube.CoreV1(), Store: s, Codec: apiserver.MetadataCodec{}, Identity: fmt.Sprintf("t%d", i)})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := c.TakeOver(ctx, synced, nil); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if n := len(s.List("")); n != scaleLeases {
				b.Fatalf("took over %d leases, want %d", n, scaleLeases)
			}
			// Hand it back final, for the next iteration.
			s.Freeze()
			if err := c.Start(runCtx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// BenchmarkScaleChurn is acquire+release pairs on a store at scale, without
// and with the checkpoint writer running (one write a second, each ~9
// shards): b.N is pairs; compare the pairs/s (target: with ≥ 0.9× without).
//
//	go test ./test/integration/checkpoint -run '^$' -bench ScaleChurn -benchtime 300000x -count 3
func BenchmarkScaleChurn(b *testing.B) {
	cp := controlplane.StartForTest(b, controlplane.Options{SkipCRDs: true})
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scale"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	store := scaleStore(b, true)
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("checkpoint=%v", on), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			writes := func() int { return 0 }
			if on {
				o := checkpoint.DefaultOptions()
				o.SecretName, o.Namespace = fmt.Sprintf("churn-%d", time.Now().UnixNano()), "scale"
				c, err := checkpoint.New(o, checkpoint.Deps{Secrets: kube.CoreV1(), Store: store, Codec: apiserver.MetadataCodec{}})
				if err != nil {
					b.Fatal(err)
				}
				go func() { done <- c.Start(ctx) }()
				writes = c.Writes
			} else {
				close(done)
			}
			b.ResetTimer()
			began := time.Now()
			for i := 0; i < b.N; i++ {
				l, err := store.Acquire(lease.AcquireRequest{Target: "churn"})
				if err != nil {
					b.Fatal(err)
				}
				store.Release(l.ID)
			}
			elapsed := time.Since(began)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
			b.ReportMetric(float64(writes()), "checkpoints")
			cancel()
			<-done
		})
	}
}
