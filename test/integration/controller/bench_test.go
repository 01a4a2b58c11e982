package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
)

// BenchmarkProvision100 measures the reconciler alone on the real API server:
// 100 Proxies created at once until all are Provisioned=True, with the fake
// provider's instances Running on the first Get (so the provider costs
// nothing and the time is the control loop's). It reports the wall time, the
// writes to Proxy objects per Proxy (finalizer, annotation and status
// writes, counted by a watch) and provider calls per Proxy. The
// sub-benchmarks differ only in ProvisioningPoll: the production default
// (5 s), which dominates, and 200 ms, which exposes the loop's own cost.
//
//	go test ./test/integration/controller/ -run '^$' -bench Provision100 -benchtime 1x
func BenchmarkProvision100(b *testing.B) {
	for _, poll := range []time.Duration{controller.DefaultIntervals().ProvisioningPoll, 200 * time.Millisecond} {
		b.Run(fmt.Sprintf("provisioningPoll=%s", poll), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				iv := controller.DefaultIntervals()
				iv.ProvisioningPoll = poll
				e := newEnv(b, envOptions{fakeOptions: []fake.Option{fake.WithGetsUntilRunning(0)}, intervals: iv})
				writes := e.countWrites()
				b.StartTimer()
				start := time.Now()
				const n = 100
				for i := range n {
					e.create(e.managed(fmt.Sprintf("p%03d", i)))
				}
				e.eventually(5*time.Minute, "all Provisioned", func() (bool, string) {
					var list crawlv1alpha1.ProxyList
					if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
						return false, err.Error()
					}
					done := 0
					for i := range list.Items {
						if list.Items[i].IsProvisioned() {
							done++
						}
					}
					return done == n, fmt.Sprintf("%d/%d provisioned", done, n)
				})
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(elapsed.Seconds(), "s/100-provisioned")
				b.ReportMetric(float64(writes())/n, "writes/proxy")
				b.ReportMetric(float64(len(e.fake.Calls()))/n, "provider-calls/proxy")
				b.ReportMetric(float64(len(e.fake.CallsOf(provider.OpCreate)))/n, "creates/proxy")
			}
		})
	}
}

// countWrites counts MODIFIED watch events of every Proxy in the namespace
// from now on: each is one write (status patch or metadata update).
func (e *env) countWrites() func() int {
	var list crawlv1alpha1.ProxyList
	w, err := e.c.Watch(context.Background(), &list, client.InNamespace(e.ns))
	if err != nil {
		e.t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(w.Stop)
	return func() int {
		time.Sleep(500 * time.Millisecond) // let the last events arrive
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}
