package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// writeMeter counts what a client sends kube-apiserver to write Secrets:
// the bodies of its creates and updates (what etcd stores and every Secret
// watcher receives) and its deletes.
type writeMeter struct {
	next http.RoundTripper

	mu                     sync.Mutex
	bytes, largest, writes int64
	deletes                int64
}

func (m *writeMeter) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.Path, "/secrets") {
		m.mu.Lock()
		switch req.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
			m.bytes += req.ContentLength
			m.largest = max(m.largest, req.ContentLength)
			m.writes++
		case http.MethodDelete:
			m.deletes++
		}
		m.mu.Unlock()
	}
	return m.next.RoundTrip(req)
}

func (m *writeMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bytes, m.largest, m.writes, m.deletes = 0, 0, 0, 0
}

// written is the bytes sent since the last reset.
func (m *writeMeter) written() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}

// A write costs what changed, not what is held: with 3,000 leases held,
// ten changes write under 4 KiB where the snapshot was twenty times that,
// and each change beyond adds tens of bytes. Negative control: the check
// fails a writer that writes every change as a snapshot (journal 0).
func TestJournalWriteIsProportionalToTheChange(t *testing.T) {
	e := setup(t)
	check := func(snapshot, ten, hundred int64) []string {
		var out []string
		if ten > 4<<10 || ten*20 > snapshot {
			out = append(out, fmt.Sprintf("10 changes wrote %d bytes (the snapshot %d): want a few KiB, far below the snapshot", ten, snapshot))
		}
		// A journal write is the index and the segment's object (about 1.5
		// KiB), plus the changes (a released lease's ID, an ended lease, a
		// granted lease: some 50 bytes a change compressed).
		if perChange := float64(hundred-ten) / 90; perChange < 10 || perChange > 200 {
			out = append(out, fmt.Sprintf("100 changes wrote %d bytes, 10 changes %d: %.0f bytes per change, want 10–200", hundred, ten, perChange))
		}
		return out
	}
	snapshot, ten, hundred := writeChanges(t, e, "proportional", checkpoint.DefaultJournalSegments)
	t.Logf("bytes written: snapshot %d, 10 changes %d, 100 changes %d", snapshot, ten, hundred)
	for _, p := range check(snapshot, ten, hundred) {
		t.Error(p)
	}
	if len(check(writeChanges(t, e, "snapshots", 0))) == 0 {
		t.Error("a writer of snapshots only passed the check")
	}
}

// writeChanges has a writer of name with journal segments checkpoint 3,000
// leases, then 10 changes, then 100, and returns the bytes of each write.
func writeChanges(t *testing.T, e *env, name string, journal int) (snapshot, ten, hundred int64) {
	t.Helper()
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	store, err := lease.New(lease.Options{MaxLeasesPerProxy: 100, MaxTTL: 2 * time.Hour}, clk)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, store, 100, 0, 0)
	var held []string
	grant := func(i int) {
		l, err := store.Acquire(lease.AcquireRequest{Target: fmt.Sprintf("site-%d.example.com", i%300), TTL: time.Hour, Holder: fmt.Sprintf("crawler-%d", i%20)})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l.ID)
	}
	for i := range 3000 {
		grant(i)
	}
	kube, meter := meteredClient(t, e.cfg)
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace, o.JournalSegments = name, e.ns, journal
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: kube.CoreV1(), Store: store, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	write := func(pairs int) int64 {
		t.Helper()
		for i := range pairs {
			store.Release(held[0])
			held = held[1:]
			grant(i)
		}
		meter.reset()
		if err := c.WriteIfChanged(ctx); err != nil {
			t.Fatal(err)
		}
		return meter.written()
	}
	return write(0), write(5), write(50)
}

// meteredClient is a client of cfg whose Secret writes m counts.
func meteredClient(t testing.TB, cfg *rest.Config) (kubernetes.Interface, *writeMeter) {
	t.Helper()
	m := &writeMeter{}
	return clientThrough(t, cfg, func(rt http.RoundTripper) http.RoundTripper {
		m.next = rt
		return m
	}), m
}

// BenchmarkCheckpointBytes is what the checkpoint writes into kube-apiserver
// while leases churn: a store holding `held` leases (signed IDs, 20
// holders, over 1,000 proxies), 80 lease changes a second (40 releases and
// 40 grants, each release also an ended lease), one write a second, for
// `seconds` seconds of a fake clock; journal=0 is every write a snapshot
// (the checkpoint before the journal). It reports bytes per lease change
// and per second (request bodies of Secret creates and updates), the
// largest object and the snapshots written. Each iteration is a run: use
// -benchtime 1x.
//
//	go test ./test/integration/checkpoint -run '^$' -bench CheckpointBytes -benchtime 1x
func BenchmarkCheckpointBytes(b *testing.B) {
	cp := controlplane.StartForTest(b, controlplane.Options{SkipCRDs: true})
	admin, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bytes"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, held := range []int{5000, 20000} {
		for _, journal := range []int{0, checkpoint.DefaultJournalSegments} {
			seconds := 900 // three journals of 300 segments
			if journal == 0 {
				seconds = 60
			}
			b.Run(fmt.Sprintf("held=%d/journal=%d", held, journal), func(b *testing.B) {
				for b.Loop() {
					benchmarkCheckpointBytes(b, cp.RESTConfig(), held, journal, seconds)
				}
			})
		}
	}
}

func benchmarkCheckpointBytes(b *testing.B, cfg *rest.Config, held, journal, seconds int) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	signer := leaseid.NewSigner()
	if err := signer.SetKey([]byte(strings.Repeat("k", leaseid.KeySize))); err != nil {
		b.Fatal(err)
	}
	store, err := lease.New(lease.Options{MaxLeasesPerProxy: 100, MaxTTL: 2 * time.Hour, IDs: signer}, clk)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		host := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
		store.UpsertProxy(lease.ProxyInfo{Namespace: "crawl", Name: fmt.Sprintf("squid-%04d", i), URL: "http://" + host + ":3128", Host: host, Port: 3128,
			Healthy: true, Attributes: map[string]string{"zone": fmt.Sprintf("europe-west1-%c", 'b'+i%3)}})
	}
	rng := rand.New(rand.NewPCG(uint64(held), uint64(journal)))
	ids := make([]string, 0, held)
	grant := func() {
		h := fmt.Sprintf("system:serviceaccount:crawl:crawler-%d", rng.IntN(20))
		l, err := store.Acquire(lease.AcquireRequest{Namespace: "crawl", Target: fmt.Sprintf("site-%d.example.com", rng.IntN(1000)), TTL: time.Hour, Holder: h, Flow: h})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, l.ID)
	}
	for range held {
		grant()
	}
	kube, meter := meteredClient(b, cfg)
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace, o.JournalSegments = fmt.Sprintf("bytes-%d-%d", held, journal), "bytes", journal
	rec := &recorder{}
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: kube.CoreV1(), Store: store, Codec: proxylease.MetadataCodec{}, Clock: clk, Recorder: rec})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.WriteIfChanged(ctx); err != nil {
		b.Fatal(err)
	}
	meter.reset()
	changes := 0
	for range seconds {
		for range 40 {
			i := rng.IntN(len(ids))
			store.Release(ids[i])
			ids[i] = ids[len(ids)-1]
			ids = ids[:len(ids)-1]
			grant()
			changes += 2
		}
		clk.Step(time.Second)
		if err := c.WriteIfChanged(ctx); err != nil {
			b.Fatal(err)
		}
	}
	index, err := kube.CoreV1().Secrets("bytes").Get(ctx, o.SecretName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// The first snapshot was written before the count.
	snapshots, err := strconv.Atoi(string(index.Data["generation"]))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(meter.bytes)/float64(changes), "B/change")
	b.ReportMetric(float64(meter.bytes)/float64(seconds), "B/s")
	b.ReportMetric(float64(meter.largest)/1024, "largest-KiB")
	b.ReportMetric(float64(snapshots-1), "snapshots")
	b.ReportMetric(float64(meter.writes)/float64(seconds), "writes/s")
	b.ReportMetric(float64(meter.deletes), "deletes")
}
