package gcpprovider

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/test/gcefake"
)

// BenchmarkFleet100 applies GCP_BENCH_FLEET (default 100) gcp Proxies at
// once, spread over four zones, and measures until every one is Ready: its VM
// RUNNING in the fake with a real Squid behind the natIP and probed healthy
// through it. It reports the wall time and the Compute Engine calls per
// Proxy by method. Each Squid takes ~90 MB: 100 need ~9 GB of memory.
//
//	go test ./test/integration/gcpprovider/ -run '^$' -bench Fleet100 -benchtime 1x -timeout 30m
func BenchmarkFleet100(b *testing.B) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("GCP_BENCH_FLEET")); err == nil && v > 0 {
		n = v
	}
	zones := []string{"us-central1-a", "us-central1-b", "europe-west1-b", "us-east1-b"}
	for iter := range b.N {
		before := shared.fake.CallCounts()
		names := make([]string, n)
		start := time.Now()
		for i := range n {
			names[i] = fmt.Sprintf("bench-%d-%03d", iter, i)
			p := newProxy(names[i], zones[i%len(zones)], "e2-small")
			if err := shared.client.Create(context.Background(), p); err != nil {
				b.Fatal(err)
			}
		}
		ready := 0
		deadline := time.Now().Add(10 * time.Minute)
		for ready < n && time.Now().Before(deadline) {
			var list crawlv1alpha1.ProxyList
			if err := shared.client.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
				b.Fatal(err)
			}
			ready = 0
			for _, p := range list.Items {
				if p.Status.Phase == crawlv1alpha1.PhaseReady && len(p.Name) > 6 && p.Name[:6] == "bench-" {
					ready++
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		elapsed := time.Since(start)
		if ready < n {
			b.Fatalf("%d of %d Ready after %s", ready, n, elapsed)
		}
		after := shared.fake.CallCounts()
		b.StopTimer()
		b.ReportMetric(elapsed.Seconds(), fmt.Sprintf("s/%d-ready", n))
		for _, op := range []string{gcefake.OpInsert, gcefake.OpGet, gcefake.OpDelete, gcefake.OpList} {
			b.ReportMetric(float64(after[op]-before[op])/float64(n), op+"s/proxy")
		}
		for _, name := range names {
			p := &crawlv1alpha1.Proxy{}
			if err := shared.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, p); err == nil {
				_ = shared.client.Delete(context.Background(), p)
			}
		}
		for _, name := range names {
			deleteAndWaitB(b, name)
		}
		b.StartTimer()
	}
}

func deleteAndWaitB(b *testing.B, name string) {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		err := shared.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &crawlv1alpha1.Proxy{})
		if client.IgnoreNotFound(err) == nil && err != nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("proxy %s not gone", name)
}
