package flowcontrol_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol/flowcontrolmetrics"
)

// storeLike approximates the cost of the lease store's acquire and release
// (pkg/lease): one mutex, a selector matched against each proxy's attributes,
// selection by fewest leases then latency then name, a random 128-bit hex
// lease ID, timestamps, and maps of leases and per-flow counts. With 64
// proxies an acquire+release costs about what pkg/lease's does (a few µs on
// the shared VM). The fast-path overhead is measured against it rather than
// against a trivial pool, because "direct acquire" means the store's
// acquire; BenchmarkFastPathAddedNanos gives the absolute cost added.
type storeLike struct {
	mu      sync.Mutex
	proxies []proxy
	leases  map[string]*lease
	held    map[string]int
	rng     *rand.ChaCha8
}

type proxy struct {
	name    string
	attrs   map[string]string
	latency int64
	active  int
}

type lease struct {
	id, flow       string
	proxy          int
	acquired, exps time.Time
}

type acquire struct {
	selector map[string]string
	ttl      time.Duration
}

var _ flowcontrol.Dispatcher[acquire, *lease] = (*storeLike)(nil)

func newStoreLike(n int) *storeLike {
	s := &storeLike{leases: map[string]*lease{}, held: map[string]int{}, rng: rand.NewChaCha8([32]byte{1})}
	for i := range n {
		s.proxies = append(s.proxies, proxy{
			name:    fmt.Sprintf("proxy-%02d", i),
			attrs:   map[string]string{"region": []string{"eu", "us"}[i%2], "tier": "standard"},
			latency: int64(20 + i%7),
		})
	}
	return s
}

func (s *storeLike) TryDispatch(flow string, a acquire) (*lease, flowcontrol.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := -1
	for i := range s.proxies {
		p := &s.proxies[i]
		if p.active >= 1 {
			continue
		}
		ok := true
		for k, v := range a.selector {
			if p.attrs[k] != v {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if best < 0 || p.active < s.proxies[best].active ||
			(p.active == s.proxies[best].active && (p.latency < s.proxies[best].latency ||
				(p.latency == s.proxies[best].latency && p.name < s.proxies[best].name))) {
			best = i
		}
	}
	if best < 0 {
		return nil, flowcontrol.NoMatch, nil
	}
	var raw [16]byte
	_, _ = s.rng.Read(raw[:])
	now := time.Now()
	l := &lease{id: hex.EncodeToString(raw[:]), flow: flow, proxy: best, acquired: now, exps: now.Add(a.ttl)}
	s.leases[l.id] = l
	s.proxies[best].active++
	s.held[flow]++
	return l, flowcontrol.Granted, nil
}

func (s *storeLike) Held(flow string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[flow]
}

func (s *storeLike) Release(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.leases[l.id]; !ok {
		return
	}
	delete(s.leases, l.id)
	s.proxies[l.proxy].active--
	s.held[l.flow]--
}

func (s *storeLike) NextChange() time.Time { return time.Time{} }

// BenchmarkFastPath shows the allocations of an acquire+release straight on
// the store and through the flow controller when nothing waits (the fast
// path adds none). Its ns/op are too noisy on a shared machine to compare;
// BenchmarkFastPathOverhead measures the overhead.
func BenchmarkFastPath(b *testing.B) {
	req := acquire{selector: map[string]string{"region": "eu"}, ttl: 5 * time.Minute}
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		s := newStoreLike(16)
		b.ReportAllocs()
		for range b.N {
			l, v, _ := s.TryDispatch("crawler-1", req)
			if v != flowcontrol.Granted {
				b.Fatal(v)
			}
			s.Release(l)
		}
	})
	for _, withProm := range []bool{false, true} {
		name := "EnqueueAndWait"
		opts := flowcontrol.Options{MaxQueued: 1000}
		if withProm {
			name += "+prometheus"
			opts.Metrics = flowcontrolmetrics.New()
		}
		b.Run(name, func(b *testing.B) {
			s := newStoreLike(16)
			c := flowcontrol.NewController[acquire, *lease](s, clock.RealClock{}, opts)
			r := flowcontrol.Request[acquire]{Flow: "crawler-1", Payload: req}
			b.ReportAllocs()
			for range b.N {
				o, l, _ := c.EnqueueAndWait(ctx, r)
				if o != flowcontrol.OutcomeDispatched {
					b.Fatal(o)
				}
				s.Release(l)
			}
		})
	}
}

// BenchmarkFastPathOverhead interleaves blocks of direct and queued
// acquire+release on the same store so that both see the same machine load
// (the benchmark machine is shared), and reports both costs and the
// overhead of the queue path in percent. One op is one block of each.
func BenchmarkFastPathOverhead(b *testing.B) {
	const block = 64
	req := acquire{selector: map[string]string{"region": "eu"}, ttl: 5 * time.Minute}
	for _, tc := range []struct {
		parallel int
		prom     bool
	}{{1, false}, {1, true}, {2, false}, {2, true}} {
		parallel := tc.parallel
		name := fmt.Sprintf("callers=%d/metrics=nop", parallel)
		opts := flowcontrol.Options{MaxQueued: 1000}
		if tc.prom {
			name = fmt.Sprintf("callers=%d/metrics=prometheus", parallel)
			opts.Metrics = flowcontrolmetrics.New()
		}
		b.Run(name, func(b *testing.B) {
			s := newStoreLike(64)
			c := flowcontrol.NewController[acquire, *lease](s, clock.RealClock{}, opts)
			r := flowcontrol.Request[acquire]{Flow: "crawler-1", Payload: req}
			ctx := context.Background()
			direct := func() {
				l, v, _ := s.TryDispatch("crawler-1", req)
				if v == flowcontrol.Granted {
					s.Release(l)
				}
			}
			queued := func() {
				o, l, _ := c.EnqueueAndWait(ctx, r)
				if o == flowcontrol.OutcomeDispatched {
					s.Release(l)
				}
			}
			// run executes fn block times on each of `parallel` goroutines.
			run := func(fn func()) time.Duration {
				start := time.Now()
				var wg sync.WaitGroup
				for range parallel {
					wg.Go(func() {
						for range block {
							fn()
						}
					})
				}
				wg.Wait()
				return time.Since(start)
			}
			var dDirect, dQueued time.Duration
			b.ResetTimer()
			for i := range b.N {
				if i%2 == 0 {
					dDirect += run(direct)
					dQueued += run(queued)
				} else {
					dQueued += run(queued)
					dDirect += run(direct)
				}
			}
			ops := float64(b.N * block * parallel)
			b.ReportMetric(float64(dDirect.Nanoseconds())/ops, "direct-ns/acquire")
			b.ReportMetric(float64(dQueued.Nanoseconds())/ops, "queued-ns/acquire")
			b.ReportMetric(100*(float64(dQueued)/float64(dDirect)-1), "overhead-%")
		})
	}
}
