package lease

import (
	"fmt"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seqIDs returns deterministic lease IDs l1, l2, … (the store calls NewID under its lock).
func seqIDs() func() string {
	var mu sync.Mutex
	n := 0
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("l%d", n)
	}
}

func newTestStore(t testing.TB, opts Options) (*Store, *clocktesting.FakeClock) {
	t.Helper()
	if opts.NewID == nil {
		opts.NewID = seqIDs()
	}
	fc := clocktesting.NewFakeClock(t0)
	s, err := New(opts, fc)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, fc
}

// px builds a healthy proxy; attrs are k, v pairs.
func px(ns, name string, latency int64, attrs ...string) ProxyInfo {
	a := map[string]string{}
	for i := 0; i+1 < len(attrs); i += 2 {
		a[attrs[i]] = attrs[i+1]
	}
	return ProxyInfo{Namespace: ns, Name: name, URL: "http://" + name + ":3128", Host: name, Port: 3128,
		Attributes: a, LatencyMillis: latency, Healthy: true}
}

func unhealthy(p ProxyInfo) ProxyInfo {
	p.Healthy = false
	return p
}

func mustAcquire(t testing.TB, s *Store, req AcquireRequest) *Lease {
	t.Helper()
	l, err := s.Acquire(req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return l
}

// coolEverywhere cools the proxy key for every target for the cooldown
// window, as a checkpoint written before untargeted reports were refused
// (ErrNoTarget) restores it: the store still honours such a cooldown.
func coolEverywhere(s *Store, key ProxyKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.coolLocked(s.entryLocked(key), "", "", s.now().Add(s.opts.CooldownWindow))
}
