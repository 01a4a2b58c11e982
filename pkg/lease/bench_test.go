//go:build unix

package lease

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// benchFleet builds n proxies over 4 namespaces with 3 attributes each.
func benchFleet(b *testing.B, n int, opts Options) *Store {
	b.Helper()
	s, _ := newTestStore(b, opts)
	for i := range n {
		s.UpsertProxy(px(fmt.Sprintf("ns%d", i%4), fmt.Sprintf("proxy-%05d", i), int64(i%97),
			"zone", fmt.Sprintf("z%d", i%8), "tier", []string{"gold", "std"}[i%2], "country", fmt.Sprintf("c%d", i%10)))
	}
	return s
}

// BenchmarkAcquireRelease: one acquire plus one release on a fleet where half
// the proxies are already leased (so selection walks a populated index).
func BenchmarkAcquireRelease(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		for _, shape := range []struct {
			name string
			req  AcquireRequest
		}{
			{"any", AcquireRequest{Target: "example.com"}},
			{"ns+selector", AcquireRequest{Namespace: "ns1", Selector: map[string]string{"zone": "z1"}, Target: "example.com"}},
		} {
			b.Run(fmt.Sprintf("proxies=%d/%s", n, shape.name), func(b *testing.B) {
				s := benchFleet(b, n, Options{NewID: randomID})
				for range n / 2 {
					if _, err := s.Acquire(AcquireRequest{TTL: time.Hour}); err != nil {
						b.Fatal(err)
					}
				}
				timePairs(b, s, shape.req)
			})
		}
	}
}

// timePairs times acquire+release pairs of req on s, with allocations and
// CPU per pair.
func timePairs(b *testing.B, s *Store, req AcquireRequest) {
	b.Helper()
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		l, err := s.Acquire(req)
		if err != nil {
			b.Fatal(err)
		}
		s.Release(l.ID)
	}
	reportCPU(b, cpu0)
}

// BenchmarkAcquireReleaseWatched is BenchmarkAcquireRelease (10 proxies,
// any) with a subscriber, as the ProxyLease watch cache always is: each
// acquire and release emits an event.
func BenchmarkAcquireReleaseWatched(b *testing.B) {
	s := benchFleet(b, 10, Options{NewID: randomID})
	var seen int
	cancel := s.Subscribe(func(Event) { seen++ })
	defer cancel()
	timePairs(b, s, AcquireRequest{Target: "example.com"})
	if seen < 2*b.N {
		b.Fatalf("subscriber saw %d events for %d pairs", seen, b.N)
	}
}

// BenchmarkAcquire times Acquire alone (the release that keeps the fleet in
// the same state runs with the timer stopped).
func BenchmarkAcquire(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("proxies=%d", n), func(b *testing.B) {
			s := benchFleet(b, n, Options{NewID: randomID})
			for range n / 2 {
				if _, err := s.Acquire(AcquireRequest{TTL: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			req := AcquireRequest{Namespace: "ns1", Selector: map[string]string{"zone": "z1"}, Target: "example.com"}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l, err := s.Acquire(req)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Release(l.ID)
				b.StartTimer()
			}
		})
	}
}

// BenchmarkAcquireReleaseCooling: 10% of the fleet cools down for the
// target; selection skips those pairs one by one (the known cost centre).
func BenchmarkAcquireReleaseCooling(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("proxies=%d", n), func(b *testing.B) {
			s := benchFleet(b, n, Options{NewID: randomID, CooldownWindow: time.Hour})
			for range n / 10 {
				l, err := s.Acquire(AcquireRequest{Target: "example.com", TTL: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Report(l.ID, ResultRateLimited, ""); err != nil {
					b.Fatal(err)
				}
				s.Release(l.ID)
			}
			timePairs(b, s, AcquireRequest{Target: "example.com"})
		})
	}
}

// BenchmarkAcquireParallel: contention on the one lock.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	s := benchFleet(b, 10000, Options{NewID: randomID})
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	defer reportCPU(b, cpu0)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := s.Acquire(AcquireRequest{})
			if err != nil {
				b.Error(err)
				return
			}
			s.Release(l.ID)
		}
	})
}

// cpuTime is this process's user+system CPU time: on a shared machine it
// measures the work, where wall ns/op also measures the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds a cpu-ns/op metric measured since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkStateInto is what one checkpoint takes from the store at the
// scale the operator is sized for (100,000 leases over 10,000 proxies,
// 100,000 cooldowns): the copy under the store lock, which every lease
// call waits behind, and the sort of the cooldowns after it.
//
//	go test ./pkg/lease -run '^$' -bench StateInto -benchtime 20x
func BenchmarkStateInto(b *testing.B) {
	s := benchFleet(b, 10000, Options{NewID: randomID, MaxLeasesPerProxy: 12, CooldownWindow: time.Hour})
	ids := make([]string, 0, 100000)
	for i := range 100000 {
		l, err := s.Acquire(AcquireRequest{TTL: time.Hour, Target: fmt.Sprintf("site-%d", i%1000), Holder: "h", Flow: "h"})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, l.ID)
	}
	for i := range 100000 {
		if err := s.Report(ids[i], ResultRateLimited, fmt.Sprintf("cool-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	var st State
	s.StateInto(&st) // the checkpointer's buffers, grown once
	var locked time.Duration
	b.ResetTimer()
	for b.Loop() {
		// The lock's share: an acquire started with the copy waits for it.
		done := make(chan time.Duration, 1)
		go func() {
			time.Sleep(50 * time.Microsecond)
			start := time.Now()
			if l, err := s.Acquire(AcquireRequest{TTL: time.Minute, Target: "probe"}); err == nil {
				s.Release(l.ID)
			}
			done <- time.Since(start)
		}()
		s.StateInto(&st)
		locked = max(locked, <-done)
	}
	b.ReportMetric(float64(locked.Microseconds())/1000, "max-acquire-wait-ms")
}
