package flowcontrol

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// benchPool is a cheap dispatcher of identical slots, so that the
// benchmarks measure the queue, not the pool. Held is a map lookup.
type benchPool struct {
	mu   sync.Mutex
	free []int
	flow []string
	held map[string]int
	// hint: answer Exhausted (true) or NoMatch (false) when nothing is free.
	hint bool
	// last is the most recent grant, for the single-goroutine benchmark.
	last      int
	onRelease func()
	// onHeld reports held changes (HeldChangeNotifications), outside the lock.
	onHeld func(flow string)
}

var _ Dispatcher[int, int] = (*benchPool)(nil)

func newBenchPool(slots int, hint bool) *benchPool {
	p := &benchPool{flow: make([]string, slots), held: map[string]int{}, hint: hint}
	for i := slots - 1; i >= 0; i-- {
		p.free = append(p.free, i)
	}
	return p
}

func (p *benchPool) TryDispatch(flow string, _ int) (int, Verdict, error) {
	p.mu.Lock()
	if len(p.free) == 0 {
		p.mu.Unlock()
		if p.hint {
			return 0, Exhausted, nil
		}
		return 0, NoMatch, nil
	}
	s := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.flow[s] = flow
	p.held[flow]++
	p.last = s
	onHeld := p.onHeld
	p.mu.Unlock()
	if onHeld != nil {
		onHeld(flow) // as the store's Acquired event would
	}
	return s, Granted, nil
}

func (p *benchPool) Held(flow string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[flow]
}

func (p *benchPool) Release(s int) {
	p.mu.Lock()
	p.free = append(p.free, s)
	flow := p.flow[s]
	if p.held[flow]--; p.held[flow] == 0 {
		delete(p.held, flow)
	}
	hook, onHeld := p.onRelease, p.onHeld
	p.mu.Unlock()
	if onHeld != nil {
		onHeld(flow)
	}
	if hook != nil {
		hook()
	}
}

func (p *benchPool) NextChange() time.Time { return time.Time{} }

type uniformDraw struct {
	r *rand.Rand
	n uint64
}

func (u uniformDraw) Uint64() uint64 { return u.r.Uint64N(u.n) }

func flowNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("crawler-%05d", i)
	}
	return names
}

// BenchmarkGrants measures the contended path on the pure core: a pool of
// 256 slots and more waiting requests than slots, their flows drawn from a
// Zipf(1.1) distribution over 10, 1,000 or 50,000 flows (plus a uniform
// draw, the worst case for the per-round Held reads). Each operation
// releases the oldest grant (a capacity event: one full round), which grants
// one waiter, and the flow that got it queues a new request — like a
// crawler whose worker goes back to waiting — so the set of waiting flows
// stays as drawn.
func BenchmarkGrants(b *testing.B) {
	const slots = 256
	type shape struct {
		flows, waiters int
		zipf           bool
	}
	type mode struct {
		name        string
		hint, track bool
	}
	modes := []mode{{"hint=exhausted", true, false}, {"hint=none", false, false}, {"hint=exhausted+track", true, true}}
	for _, sh := range []shape{{10, 1024, true}, {1000, 4096, true}, {50000, 65536, true}, {50000, 50000, false}} {
		for _, m := range modes {
			dist := "zipf"
			if !sh.zipf {
				dist = "uniform"
			}
			name := fmt.Sprintf("flows=%d/waiters=%d/%s/%s", sh.flows, sh.waiters, dist, m.name)
			flows, waiters := sh.flows, sh.waiters
			b.Run(name, func(b *testing.B) {
				names := flowNames(flows)
				rng := rand.New(rand.NewPCG(1, 2))
				var zipf interface{ Uint64() uint64 } = rand.NewZipf(rng, 1.1, 1, uint64(flows-1))
				if !sh.zipf {
					zipf = uniformDraw{rng, uint64(flows)}
				}
				pool := newBenchPool(slots, m.hint)
				c := NewCore[int, int](pool, clock.RealClock{}, Options{HeldChangeNotifications: m.track})
				if m.track {
					pool.onHeld = c.HeldChanged
				}
				var held []int
				for len(held) < slots {
					o, g, _, _ := c.Enqueue(Request[int]{Flow: names[zipf.Uint64()]})
					if o != OutcomeDispatched {
						b.Fatalf("warm-up: %v", o)
					}
					held = append(held, g)
				}
				for range waiters {
					if o, _, _, _ := c.Enqueue(Request[int]{Flow: names[zipf.Uint64()]}); o != OutcomePending {
						b.Fatalf("waiter: %v", o)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				start, cpu0 := time.Now(), processCPU()
				for range b.N {
					g := held[0]
					held = held[1:]
					pool.Release(g)
					c.OnCapacity()
					held = append(held, pool.last)
					c.Enqueue(Request[int]{Flow: pool.flow[pool.last]})
				}
				elapsed, cpu := time.Since(start), processCPU()-cpu0
				b.StopTimer()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "grants/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				distinct := 0
				for _, band := range c.bands {
					distinct += len(band.flows)
				}
				b.ReportMetric(float64(distinct), "waiting-flows")
				if st := c.Stats(); st.Waiting != waiters {
					b.Fatalf("waiting %d, want %d", st.Waiting, waiters)
				}
			})
		}
	}
}

// BenchmarkReleaseToReturn measures, with real goroutines and the real
// clock, the time from a release (Dispatcher.Release firing the capacity
// hook) to the return of the waiter's EnqueueAndWait: 8 slots, 64 waiting
// goroutines over 8 flows. It reports p50 and p99 of that latency.
func BenchmarkReleaseToReturn(b *testing.B) {
	const slots, waiterGoroutines, flows = 8, 64, 8
	pool := newBenchPool(slots, true)
	c := NewController[int, int](pool, clock.RealClock{}, Options{})
	pool.onRelease = c.OnCapacity
	type sample struct {
		grant int
		at    time.Time
	}
	returned := make(chan sample, waiterGoroutines)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	names := flowNames(flows)
	var held []int
	for i := range slots {
		_, g, _ := c.EnqueueAndWait(ctx, Request[int]{Flow: names[i%flows]})
		held = append(held, g)
	}
	for i := range waiterGoroutines {
		wg.Go(func() {
			for {
				o, g, _ := c.EnqueueAndWait(ctx, Request[int]{Flow: names[i%flows]})
				if o != OutcomeDispatched {
					return
				}
				returned <- sample{g, time.Now()}
			}
		})
	}
	for c.Stats().Waiting < waiterGoroutines {
		time.Sleep(time.Millisecond)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		g := held[0]
		held = held[1:]
		t := time.Now()
		pool.Release(g)
		s := <-returned
		lat = append(lat, s.at.Sub(t))
		held = append(held, s.grant)
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkFastPathAddedNanos gives the absolute cost the controller adds to
// an acquire+release when nothing waits, over the cheap benchPool, with
// interleaved blocks so both sides see the same machine load.
func BenchmarkFastPathAddedNanos(b *testing.B) {
	const block = 256
	pool := newBenchPool(4, true)
	c := NewController[int, int](pool, clock.RealClock{}, Options{MaxQueued: 1000})
	req := Request[int]{Flow: "crawler-1"}
	ctx := context.Background()
	run := func(fn func()) time.Duration {
		start := time.Now()
		for range block {
			fn()
		}
		return time.Since(start)
	}
	direct := func() {
		g, _, _ := pool.TryDispatch("crawler-1", 0)
		pool.Release(g)
	}
	queued := func() {
		_, g, _ := c.EnqueueAndWait(ctx, req)
		pool.Release(g)
	}
	var dd, dq time.Duration
	for i := range b.N {
		if i%2 == 0 {
			dd += run(direct)
			dq += run(queued)
		} else {
			dq += run(queued)
			dd += run(direct)
		}
	}
	ops := float64(b.N * block)
	b.ReportMetric(float64(dd.Nanoseconds())/ops, "direct-ns/acquire")
	b.ReportMetric(float64(dq.Nanoseconds())/ops, "queued-ns/acquire")
	b.ReportMetric(float64((dq-dd).Nanoseconds())/ops, "added-ns/acquire")
}
