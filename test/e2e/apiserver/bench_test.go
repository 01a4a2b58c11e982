package apiservere2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	discoveryclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
)

// benchWorkers is the number of concurrent clients, as in the ConfigMap and
// Lease baselines of the project's FACTS (client-go, 16 workers).
const benchWorkers = 16

// runPairs runs b.N create+delete pairs on benchWorkers goroutines and
// reports pairs/s.
func runPairs(b *testing.B, pair func(ctx context.Context, worker int) error) {
	b.Helper()
	b.ResetTimer()
	rate, err := pairsPerSecond(b.N, benchWorkers, func(ctx context.Context) error { return pair(ctx, 0) })
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate, "pairs/s")
}

// pairFor is one create+delete pair of kind ("ProxyLease" or "ConfigMap",
// nil for another) in ns, as the identity of cfg.
func pairFor(cfg *rest.Config, kind, ns string) func(ctx context.Context) error {
	switch kind {
	case "ProxyLease":
		leases := versioned.NewForConfigOrDie(cfg).LeasingV1alpha1().ProxyLeases(ns)
		return func(ctx context.Context) error {
			pl, err := leases.Create(ctx, newLease("bench-"), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			return leases.Delete(ctx, pl.Name, metav1.DeleteOptions{})
		}
	case "ConfigMap":
		cms := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns)
		return func(ctx context.Context) error {
			cm, err := cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"},
				Data:       map[string]string{"target": "example.com"},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			return cms.Delete(ctx, cm.Name, metav1.DeleteOptions{})
		}
	}
	return nil
}

// pairsPerSecond runs n pairs on workers goroutines and returns the rate; the
// first error stops the run.
func pairsPerSecond(n, workers int, pair func(ctx context.Context) error) (float64, error) {
	ctx := context.Background()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && failed.Load() == nil {
				if err := pair(ctx); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		return 0, *err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// unthrottled is the admin config without client-side rate limiting, so the
// server is what is measured.
func unthrottled() *rest.Config {
	cfg := rest.CopyConfig(shared.admin)
	cfg.QPS = -1
	cfg.RateLimiter = nil
	return cfg
}

// BenchmarkCreateDelete measures create+delete pairs with 16 workers:
// ProxyLease through kube-apiserver and the aggregation layer, ConfigMap
// through the same kube-apiserver (etcd-backed), and the HTTP discovery API
// on the same lease store; the ProxyLease and ConfigMap paths both as the
// admin (system:masters, which every authorizer skips) and as a
// ServiceAccount with a Role (what an in-cluster crawler is). Run:
//
//	go test ./test/e2e/apiserver -run '^$' -bench CreateDelete -benchtime 3000x
func BenchmarkCreateDelete(b *testing.B) {
	ns := namespace(b, "bench")
	for i := 0; i < 2*benchWorkers; i++ { // exclusive leases: one proxy per live lease, and spare
		addProxy(b, ns, fmt.Sprintf("px-%02d", i), nil)
	}
	sa := serviceAccount(b, ns, "crawler", crawlerRole(ns))
	for _, who := range []struct {
		name string
		cfg  *rest.Config
	}{{"admin", unthrottled()}, {"serviceaccount", sa}} {
		b.Run("ProxyLease/"+who.name, func(b *testing.B) {
			pair := pairFor(who.cfg, "ProxyLease", ns)
			runPairs(b, func(ctx context.Context, _ int) error { return pair(ctx) })
		})

		b.Run("ConfigMap/"+who.name, func(b *testing.B) {
			pair := pairFor(who.cfg, "ConfigMap", ns)
			runPairs(b, func(ctx context.Context, _ int) error { return pair(ctx) })
		})
	}

	b.Run("HTTP", func(b *testing.B) {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.MaxIdleConnsPerHost = benchWorkers
		defer transport.CloseIdleConnections()
		client, err := discoveryclient.New(shared.httpURL, "", discoveryclient.WithHTTPClient(&http.Client{Transport: transport}))
		if err != nil {
			b.Fatal(err)
		}
		runPairs(b, func(ctx context.Context, _ int) error {
			l, err := client.Acquire(ctx, wire.AcquireRequest{Namespace: ns, Target: "example.com"})
			if err != nil {
				return fmt.Errorf("acquire: %w", err)
			}
			if err := client.Release(ctx, l.LeaseID); err != nil {
				return fmt.Errorf("release: %w", err)
			}
			return nil
		})
	})
}
