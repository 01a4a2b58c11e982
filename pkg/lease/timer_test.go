package lease

import (
	"context"
	"sync"
	"testing"
	"time"
)

// waitArmed waits until Start's timer is armed for at.
func waitArmed(t *testing.T, s *Store, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.armed.Load() != at.UnixNano() {
		if time.Now().After(deadline) {
			t.Fatalf("timer armed for %v, want %v", time.Unix(0, s.armed.Load()).UTC(), at)
		}
		time.Sleep(time.Millisecond)
	}
}

// Start's one timer delivers each expiry at its instant, with nobody calling
// the store: it re-arms for an earlier lease granted after it slept, and
// otherwise sleeps at most SweepInterval.
func TestStartTimerFiresAtTheNextChange(t *testing.T) {
	s, clk := newTestStore(t, Options{SweepInterval: time.Hour})
	s.UpsertProxy(px("ns", "p1", 1))
	s.UpsertProxy(px("ns", "p2", 2))
	var mu sync.Mutex
	var ended []string
	s.Subscribe(func(ev Event) {
		if ev.Type == Deleted {
			mu.Lock()
			ended = append(ended, ev.Lease.Name)
			mu.Unlock()
		}
	})
	endedNow := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ended...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = s.Start(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitArmed(t, s, t0.Add(time.Hour)) // nothing scheduled: the longest sleep
	long := mustAcquire(t, s, AcquireRequest{Namespace: "ns", Name: "long", TTL: 50 * time.Minute})
	waitArmed(t, s, long.ExpiresAt)
	short := mustAcquire(t, s, AcquireRequest{Namespace: "ns", Name: "short", TTL: 10 * time.Second})
	waitArmed(t, s, short.ExpiresAt) // an earlier change re-arms it

	clk.Step(9 * time.Second)
	if got := endedNow(); len(got) != 0 {
		t.Fatalf("ended before expiry: %v", got)
	}
	clk.Step(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for len(endedNow()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := endedNow(); len(got) != 1 || got[0] != "short" {
		t.Fatalf("ended at the short lease's expiry: %v, want [short]", got)
	}
	waitArmed(t, s, long.ExpiresAt)
}
