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
	ctx := context.Background()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < benchWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) && failed.Load() == nil {
				if err := pair(ctx, w); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
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
// on the same lease store. Run:
//
//	go test ./test/e2e/apiserver -run '^$' -bench CreateDelete -benchtime 3000x
func BenchmarkCreateDelete(b *testing.B) {
	ns := namespace(b, "bench")
	for i := 0; i < 2*benchWorkers; i++ { // exclusive leases: one proxy per live lease, and spare
		addProxy(b, ns, fmt.Sprintf("px-%02d", i), nil)
	}

	b.Run("ProxyLease", func(b *testing.B) {
		leases := versioned.NewForConfigOrDie(unthrottled()).LeasingV1alpha1().ProxyLeases(ns)
		runPairs(b, func(ctx context.Context, _ int) error {
			pl, err := leases.Create(ctx, newLease("bench-"), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			if err := leases.Delete(ctx, pl.Name, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
			return nil
		})
	})

	b.Run("ConfigMap", func(b *testing.B) {
		cms := kubernetes.NewForConfigOrDie(unthrottled()).CoreV1().ConfigMaps(ns)
		runPairs(b, func(ctx context.Context, _ int) error {
			cm, err := cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"},
				Data:       map[string]string{"target": "example.com"},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
			return nil
		})
	})

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
