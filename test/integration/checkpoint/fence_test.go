package checkpoint

import (
	"context"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// replica is one operator's store and checkpointer on the real clock (the
// takeover grace is real time).
func (e *env) replica(t *testing.T, identity string) (*lease.Store, *checkpoint.Checkpointer) {
	t.Helper()
	store, err := lease.New(lease.Options{MaxLeasesPerProxy: 4, MaxTTL: 2 * time.Hour}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "crawl", Name: "p1", URL: "http://127.0.0.2:3128", Healthy: true})
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace = "leases", e.ns
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: e.kube.CoreV1(), Store: store, Codec: proxylease.MetadataCodec{}, Identity: identity})
	if err != nil {
		t.Fatal(err)
	}
	return store, c
}

func synced(context.Context) bool { return true }

// A replica that takes over fences the one before: that one's next write
// fails with ErrFenced and its writer loop stops; nothing it wrote after the
// takeover's load can be mixed in.
func TestTakeoverFencesThePreviousWriter(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	old, oc := e.replica(t, "old")
	if _, err := old.Acquire(lease.AcquireRequest{Target: "before"}); err != nil {
		t.Fatal(err)
	}
	if err := oc.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	// Control: its own writes go through while nobody took over.
	if _, err := old.Acquire(lease.AcquireRequest{Target: "still"}); err != nil {
		t.Fatal(err)
	}
	if err := oc.WriteIfChanged(ctx); err != nil {
		t.Fatalf("control: %v", err)
	}

	next, nc := e.replica(t, "next")
	start := time.Now()
	if err := nc.TakeOver(ctx, synced, nil); err != nil {
		t.Fatal(err)
	}
	// Not marked final (a crash): the grace was waited out.
	if took := time.Since(start); took < time.Second {
		t.Errorf("takeover of an unfinished checkpoint took %s, want the 1s grace", took)
	}
	if got := len(next.List("")); got != 2 {
		t.Fatalf("took over %d leases, want 2", got)
	}
	if _, err := old.Acquire(lease.AcquireRequest{Target: "zombie"}); err != nil {
		t.Fatal(err)
	}
	if err := oc.WriteIfChanged(ctx); !checkpoint.IsFenced(err) {
		t.Fatalf("the old writer after the takeover: %v, want ErrFenced", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := oc.Start(runCtx); !checkpoint.IsFenced(err) {
		t.Errorf("the old writer loop: %v, want it to stop fenced", err)
	}
	// The new writer is not fenced by its own writes.
	if _, err := next.Acquire(lease.AcquireRequest{Target: "new"}); err != nil {
		t.Fatal(err)
	}
	if err := nc.WriteIfChanged(ctx); err != nil {
		t.Errorf("the new writer: %v", err)
	}
}

// A leader cut off from kube-apiserver keeps trying its last checkpoint; the
// replica taking over waits the grace for it, and so loses nothing. A last
// checkpoint marked final is taken over at once.
func TestTakeoverWaitsForTheLastWrite(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	old, oc := e.replica(t, "old")
	if err := oc.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	// Granted after the last regular checkpoint: only the last one has it.
	late, err := old.Acquire(lease.AcquireRequest{Target: "late"})
	if err != nil {
		t.Fatal(err)
	}
	next, nc := e.replica(t, "next")
	took := make(chan error, 1)
	go func() { took <- nc.TakeOver(ctx, synced, nil) }()
	time.Sleep(300 * time.Millisecond) // the API answers the old leader again
	old.Freeze()
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	if err := oc.Start(runCtx); err != nil {
		t.Fatalf("the old leader's last checkpoint: %v", err)
	}
	if err := <-took; err != nil {
		t.Fatal(err)
	}
	if _, ok := next.Get(late.ID); !ok {
		t.Fatal("the lease granted before the old leader's last write is lost")
	}

	// Now the new one stops cleanly; a third takes over without the grace.
	runCtx, cancel = context.WithCancel(ctx)
	cancel()
	next.Freeze()
	if err := nc.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	third, tc := e.replica(t, "third")
	start := time.Now()
	if err := tc.TakeOver(ctx, synced, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("takeover of a final checkpoint took %s, want no grace", d)
	}
	if _, ok := third.Get(late.ID); !ok {
		t.Error("the lease is lost at the second handover")
	}
}
