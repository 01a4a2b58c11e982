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

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

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
// country), with n leases from 20 holders over 1,000 sites and n cooldowns
// (n/scaleProxies targets per proxy).
func scaleStore(b *testing.B, n int) *lease.Store { return scaleStoreIDs(b, n, true) }

// scaleStoreIDs is scaleStore with signed IDs (--lease-signing-secret) or
// the store's random ones.
func scaleStoreIDs(b *testing.B, n int, signed bool) *lease.Store {
	b.Helper()
	// 20 holders run the cooldowns of a fleet-sized crawl between them.
	opts := lease.Options{MaxLeasesPerProxy: 12, MaxTTL: 2 * time.Hour, CooldownWindow: time.Hour, MaxCooldownsPerHolder: 1 << 20}
	if signed {
		signer := leaseid.NewSigner()
		if err := signer.SetKey([]byte(strings.Repeat("k", leaseid.KeySize))); err != nil {
			b.Fatal(err)
		}
		opts.IDs = signer
	}
	s, err := lease.New(opts, clock.RealClock{})
	if err != nil {
		b.Fatal(err)
	}
	feedScaleProxies(s)
	if n > 0 {
		fillCooldowns(b, s, fillLeases(b, s, make([]string, 0, n), n), n)
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
func fillLeases(b *testing.B, s *lease.Store, ids []string, n int) []string {
	b.Helper()
	for i := range n {
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

func fillCooldowns(b *testing.B, s *lease.Store, ids []string, n int) {
	b.Helper()
	for i := range n {
		// Distinct targets spread over the proxies: the store spreads
		// leases evenly.
		if err := s.Report(ids[i%len(ids)], lease.ResultRateLimited, fmt.Sprintf("cool-%d.example.com", i)); err != nil {
			b.Fatal(err)
		}
	}
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
// store does not hold), per live lease and per cooldown, with signed lease
// IDs (reclaimable after a crash) and with random ones. Targets: ≤ 4 KiB
// per proxy, ≤ 512 B per lease. Each iteration builds a store: run it with
// -benchtime 1x.
//
//	go test ./test/integration/checkpoint -run '^$' -bench ScaleMemory -benchtime 1x -count 3
func BenchmarkScaleMemory(b *testing.B) {
	for _, signed := range []bool{true, false} {
		b.Run(fmt.Sprintf("signedIDs=%v", signed), func(b *testing.B) {
			var perProxy, perLease, perCooldown, perLeaseWriter, rss float64
			for b.Loop() {
				ids := make([]string, 0, scaleLeases) // the test's own: before h0
				h0 := heapNow()
				s := scaleStoreIDs(b, 0, signed)
				h1 := heapNow()
				ids = fillLeases(b, s, ids, scaleLeases) // the IDs' bytes are the store's
				h2 := heapNow()
				fillCooldowns(b, s, ids, scaleCooldowns)
				h3 := heapNow()
				// The checkpoint writer keeps its buffers (the state copy,
				// the document, the last payload) from one write to the
				// next: after one write, what it holds.
				cp := discardingCheckpointer(b, s)
				h4 := heapNow()
				perProxy = float64(int64(h1)-int64(h0)) / scaleProxies
				perLease = float64(int64(h2)-int64(h1)) / scaleLeases
				perCooldown = float64(int64(h3)-int64(h2)) / scaleCooldowns
				perLeaseWriter = float64(int64(h4)-int64(h3)) / scaleLeases
				rss = rssBytes()
				runtime.KeepAlive(ids)
				runtime.KeepAlive(s)
				runtime.KeepAlive(cp)
			}
			b.ReportMetric(perProxy, "heap-B/proxy")
			b.ReportMetric(perLease, "heap-B/lease")
			b.ReportMetric(perCooldown, "heap-B/cooldown")
			b.ReportMetric(perLeaseWriter, "writer-heap-B/lease")
			b.ReportMetric(rss/(1<<20), "process-RSS-MiB")
		})
	}
}

// discardingCheckpointer is a Checkpointer of s that has written once to
// a Secrets API that keeps nothing (so that only the writer's own memory
// is measured).
func discardingCheckpointer(b *testing.B, s *lease.Store) *checkpoint.Checkpointer {
	b.Helper()
	kube := fake.NewClientset()
	kube.PrependReactor("*", "secrets", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if c, ok := a.(k8stesting.CreateAction); ok {
			return true, c.GetObject(), nil
		}
		if u, ok := a.(k8stesting.UpdateAction); ok {
			return true, u.GetObject(), nil
		}
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "")
	})
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace = "leases", "scale"
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: kube.CoreV1(), Store: s, Codec: proxylease.MetadataCodec{}})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.WriteIfChanged(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c
}

// scaleWriter is the identity of the scale benchmarks' writer.
const scaleWriter = "scale-writer"

// scaleEnv is a control plane and one store, checkpointed once.
type scaleEnv struct {
	kube  kubernetes.Interface
	store *lease.Store
	cp    *checkpoint.Checkpointer
	opts  checkpoint.Options
}

func newScaleEnv(b *testing.B, kube kubernetes.Interface, name string, n int) *scaleEnv {
	b.Helper()
	e := &scaleEnv{kube: kube, store: scaleStore(b, n)}
	e.opts = checkpoint.DefaultOptions()
	e.opts.SecretName, e.opts.Namespace = name, "scale"
	var err error
	if e.cp, err = checkpoint.New(e.opts, checkpoint.Deps{Secrets: kube.CoreV1(), Store: e.store, Codec: proxylease.MetadataCodec{}, Identity: scaleWriter}); err != nil {
		b.Fatal(err)
	}
	if err := e.cp.WriteIfChanged(context.Background()); err != nil {
		b.Fatal(err)
	}
	return e
}

// benchControlPlane starts a control plane with namespace ns.
func benchControlPlane(b *testing.B, ns string) kubernetes.Interface {
	b.Helper()
	cp := controlplane.StartForTest(b, controlplane.Options{SkipCRDs: true})
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	return kube
}

// BenchmarkScaleCheckpoint with 20,000 and 70,000 leases and as many
// cooldowns and at the full scale, 100,000 live leases over 10,000 proxies
// with 100,000 cooldowns: write is one journal write (one lease changed:
// state copy, diff, encode, a segment and the index), snapshot one snapshot
// (state copy, encode, the shards and the index; the size and Secret
// count), takeover a replica taking the snapshot over (fence, read, decode,
// restore into a store the informer has fed; no grace is waited: the
// checkpoint was written final), takeover-journal the same with a full
// journal behind the snapshot (300 segments of 80 changes each: the most a
// takeover reads; taken over under the writer's identity, so that no grace
// is waited either).
//
//	go test ./test/integration/checkpoint -run '^$' -bench ScaleCheckpoint -benchtime 3x
func BenchmarkScaleCheckpoint(b *testing.B) {
	kube := benchControlPlane(b, "scale")
	for _, n := range []int{20000, 70000, scaleLeases} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			benchmarkScaleCheckpoint(b, newScaleEnv(b, kube, fmt.Sprintf("leases-%d", n), n), n)
		})
	}
}

func benchmarkScaleCheckpoint(b *testing.B, e *scaleEnv, n int) {
	ctx := context.Background()
	change := func(b *testing.B, pairs int) {
		for range pairs {
			l, err := e.store.Acquire(lease.AcquireRequest{Target: "change", TTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			e.store.Release(l.ID)
		}
	}
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			change(b, 1)
			if err := e.cp.WriteIfChanged(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The last write is a snapshot, final: a takeover does not wait for it.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	b.Run("snapshot", func(b *testing.B) {
		for b.Loop() {
			change(b, 1)
			if err := e.cp.Start(stopped); err != nil {
				b.Fatal(err)
			}
		}
		list, err := e.kube.CoreV1().Secrets("scale").List(ctx, metav1.ListOptions{LabelSelector: componentLabel})
		if err != nil {
			b.Fatal(err)
		}
		size, secrets := 0, 0
		for _, s := range list.Items {
			if s.Name == e.opts.SecretName || strings.HasPrefix(s.Name, e.opts.SecretName+"-") {
				size += len(s.Data["checkpoint.json.gz"])
				secrets++
			}
		}
		b.ReportMetric(float64(secrets), "secrets")
		b.ReportMetric(float64(size)/(1<<20), "MiB")
	})
	// takeover loads the checkpoint into new stores under the writer's
	// identity: the writer is not fenced (its next write finds the index
	// changed, rereads it and writes a snapshot), and no grace is waited.
	takeover := func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s := scaleStore(b, 0)
			c, err := checkpoint.New(e.opts, checkpoint.Deps{Secrets: e.kube.CoreV1(), Store: s, Codec: proxylease.MetadataCodec{}, Identity: scaleWriter})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := c.TakeOver(ctx, synced, nil); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if got := len(s.List("")); got != n {
				b.Fatalf("took over %d leases, want %d", got, n)
			}
			b.StartTimer()
		}
	}
	b.Run("takeover", takeover)
	// The first write finds the index the takeovers changed: it rereads it,
	// and the next is a snapshot.
	change(b, 1)
	_ = e.cp.WriteIfChanged(ctx)
	for range checkpoint.DefaultJournalSegments + 1 {
		change(b, 40)
		if err := e.cp.WriteIfChanged(ctx); err != nil {
			b.Fatal(err)
		}
	}
	index, err := e.kube.CoreV1().Secrets("scale").Get(ctx, e.opts.SecretName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	segments, _ := strconv.Atoi(string(index.Data["journal"]))
	if segments < checkpoint.DefaultJournalSegments-1 {
		b.Fatalf("a journal of %d segments, want a full one", segments)
	}
	b.Run("takeover-journal", func(b *testing.B) {
		takeover(b)
		b.ReportMetric(float64(segments), "segments")
	})
	e.store.Freeze()
	if err := e.cp.Start(stopped); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkScaleChurn is acquire+release pairs on a store at scale, without
// and with the checkpoint writer running (one write a second, each ~9
// shards): b.N is pairs; compare the pairs/s (target: with ≥ 0.9× without).
//
//	go test ./test/integration/checkpoint -run '^$' -bench ScaleChurn -benchtime 300000x -count 3
func BenchmarkScaleChurn(b *testing.B) {
	kube := benchControlPlane(b, "scale")
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("checkpoint=%v", on), func(b *testing.B) {
			// A store of its own per run: the churn leaves a million ended
			// leases in the report window, which a later run would carry.
			store := scaleStore(b, scaleLeases)
			churnPairs(b, kube, "scale", store, on)
		})
	}
}
