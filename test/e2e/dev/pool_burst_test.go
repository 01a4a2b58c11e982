package deve2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/devenv"
)

// burst is how many requests wait at once on the empty VM pool.
const burst = 50

// TestGCPPoolBurst: 50 lease requests wait on an empty ProxyPool of Compute
// Engine VMs (the fake, a Squid behind each VM); the pool grows to 50 VMs
// and every request is granted its own VM. Logs the time to all VMs created
// and to all granted (docs/benchmarks.md). Then half the leases end: the
// pool shrinks to the other half, never deleting a leased VM.
func TestGCPPoolBurst(t *testing.T) {
	env := startEnv(t, devenv.Options{NodeName: "proxy-operator-dev-burst",
		PoolFirst: netip.MustParseAddr("127.0.13.150"), PoolLast: netip.MustParseAddr("127.0.13.200"),
		GCEPoolFirst: netip.MustParseAddr("127.0.13.2"), GCEPoolLast: netip.MustParseAddr("127.0.13.120"),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	scheme, err := app.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := client.New(env.ControlPlane.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	pool := builders.ProxyPool("default", "vms").Replicas(0).
		Autoscaling(0, burst).TargetUtilization(100).ScaleDownDelay(60).
		Template(builders.Proxy("", "").GCP("us-central1-a", "e2-small").NoAttrs().Attr("pool", "vms").Probe(env.OriginURL+"/", 0, 0)).
		Obj()
	if err := kc.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	c := leaseClient(t, env, "")
	began := time.Now()
	var mu sync.Mutex
	var took []time.Duration
	proxies := map[string]bool{}
	var leaseIDs []struct{ id, proxy string }
	var wg sync.WaitGroup
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"pool": "vms"}, Target: fmt.Sprintf("burst-%d", i),
				TTLSeconds: 600, WaitSeconds: 280})
			if err != nil {
				t.Errorf("waiting request %d: %v", i, err)
				return
			}
			mu.Lock()
			took = append(took, time.Since(began))
			proxies[l.Proxy.Name] = true
			leaseIDs = append(leaseIDs, struct{ id, proxy string }{l.LeaseID, l.Proxy.Name})
			mu.Unlock()
		}()
	}
	// When the pool had all its VMs created (each with a provider ID).
	var created atomic.Int64 // nanoseconds
	go func() {
		for ctx.Err() == nil {
			var list crawlv1alpha1.ProxyList
			if err := kc.List(ctx, &list, client.MatchingLabels{crawlv1alpha1.PoolLabel: "vms"}); err == nil {
				n := 0
				for _, p := range list.Items {
					if p.Status.ProviderID != "" {
						n++
					}
				}
				if n >= burst {
					created.Store(int64(time.Since(began)))
					return
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(took) != burst || len(proxies) != burst {
		t.Fatalf("%d of %d requests granted, on %d VMs", len(took), burst, len(proxies))
	}
	slices.Sort(took)
	t.Logf("burst of %d waiting requests on an empty gcp pool: all VMs created after %s; granted p50 %s, p90 %s, all %s",
		burst, time.Duration(created.Load()).Round(100*time.Millisecond), took[burst/2].Round(100*time.Millisecond), took[burst*9/10].Round(100*time.Millisecond), took[burst-1].Round(100*time.Millisecond))

	// Demand halves: the pool shrinks to the leases still held, deleting
	// only VMs whose lease ended; every held lease keeps its VM.
	if err := kc.Patch(ctx, pool, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"autoscaling":{"scaleDownDelaySeconds":1}}}`))); err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for i, l := range leaseIDs {
		if i%2 == 0 {
			kept[l.proxy] = true
			continue
		}
		if err := c.Release(ctx, l.id); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		var list crawlv1alpha1.ProxyList
		if err := kc.List(ctx, &list, client.MatchingLabels{crawlv1alpha1.PoolLabel: "vms"}); err != nil {
			return false, err
		}
		live := map[string]bool{}
		for _, p := range list.Items {
			if p.DeletionTimestamp.IsZero() {
				live[p.Name] = true
			}
		}
		for name := range kept {
			if !live[name] {
				return false, fmt.Errorf("VM %s deleted while leased", name)
			}
		}
		return len(live) == len(kept), nil
	}); err != nil {
		t.Fatalf("shrinking to the %d leases held (of %d VMs): %v", len(kept), len(proxies), err)
	}
}
