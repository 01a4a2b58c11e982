package checkpoint

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// BenchmarkChurnWithCheckpoint is acquire+release pairs on a store holding
// 10,000 leases, without and with the checkpoint writer running (real clock,
// one write a second into a real kube-apiserver). b.N is pairs; compare the
// two pairs/s (target: with ≥ 0.9× without).
//
//	go test ./test/integration/checkpoint -run '^$' -bench ChurnWithCheckpoint -benchtime 200000x -count 3
func BenchmarkChurnWithCheckpoint(b *testing.B) {
	kube := benchControlPlane(b, "bench")
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("checkpoint=%v", on), func(b *testing.B) {
			store, err := lease.New(lease.Options{MaxLeasesPerProxy: 100, MaxTTL: 2 * time.Hour}, clock.RealClock{})
			if err != nil {
				b.Fatal(err)
			}
			for i := range 200 {
				store.UpsertProxy(lease.ProxyInfo{Namespace: "crawl", Name: fmt.Sprintf("p%03d", i), URL: "http://10.0.0.1:3128", Host: "10.0.0.1", Port: 3128, Healthy: true})
			}
			for i := range 10000 {
				if _, err := store.Acquire(lease.AcquireRequest{Target: fmt.Sprintf("held-%d", i), TTL: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			churnPairs(b, kube, "bench", store, on)
		})
	}
}

// churnPairs times b.N acquire+release pairs on store, with the checkpoint
// writer running into namespace ns (on) or not, and reports pairs/s and
// the checkpoints written meanwhile.
func churnPairs(b *testing.B, kube kubernetes.Interface, ns string, store *lease.Store, on bool) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	writes := func() int { return 0 }
	if on {
		o := checkpoint.DefaultOptions()
		o.SecretName, o.Namespace = fmt.Sprintf("churn-%d", time.Now().UnixNano()), ns
		rec := &recorder{}
		c, err := checkpoint.New(o, checkpoint.Deps{Secrets: kube.CoreV1(), Store: store, Codec: proxylease.MetadataCodec{}, Recorder: rec})
		if err != nil {
			b.Fatal(err)
		}
		go func() { done <- c.Start(ctx) }()
		writes = rec.written
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
}
