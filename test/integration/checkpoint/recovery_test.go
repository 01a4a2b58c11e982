package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
)

// writtenReplica is a replica that wrote a checkpoint of faultLeases leases
// and as many cooldowns (3 Secrets), and the index Secret it wrote.
func (e *env) writtenReplica(t *testing.T, journal int) (*faultReplica, *corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	r := e.faultReplicaJournal(t, "w", 1, journal)
	churn(t, r.store, rand.New(rand.NewPCG(1, 1)), faultLeases, "c", nil)
	if err := r.cp.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	idx, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r, idx
}

// takesOverAll has a new replica take the checkpoint over and fails unless
// it holds what r holds.
func (e *env) takesOverAll(t *testing.T, r *faultReplica) {
	t.Helper()
	next := e.faultReplica(t, "next", 2)
	if err := next.cp.TakeOver(context.Background(), synced, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := snap(next.store), snap(r.store); !got.equal(want) {
		t.Errorf("took over %d leases, %d cooldowns; want %d, %d", len(got.leases), len(got.cools), len(want.leases), len(want.cools))
	}
}

// A shard Secret already at the next generation's name (a writer killed
// after creating it, or a fenced one's) does not stop the writer: it takes
// a later generation and deletes the leftover (today's writer failed on
// AlreadyExists at every write, forever).
func TestWriteSkipsLeftoverShards(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	r, idx := e.writtenReplica(t, 0) // every write a snapshot
	gen, _ := strconv.Atoi(string(idx.Data["generation"]))
	if e.shardCount(t) < 2 {
		t.Fatalf("the checkpoint spans %d Secret: no shard to collide with", e.shardCount(t))
	}
	for g := gen + 1; g <= gen+2; g++ {
		left := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("leases-%d-1", g), Namespace: e.ns,
			Labels: map[string]string{"app.kubernetes.io/component": "lease-checkpoint"}}, Data: map[string][]byte{"checkpoint.json.gz": []byte("stale")}}
		if _, err := e.kube.CoreV1().Secrets(e.ns).Create(ctx, left, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		churn(t, r.store, rand.New(rand.NewPCG(2, uint64(i))), 5, fmt.Sprintf("x%d", i), nil)
		if err := r.cp.WriteIfChanged(ctx); err != nil {
			t.Fatalf("write %d after leftovers appeared: %v", i, err)
		}
	}
	if n := e.leftoverShards(t); n != 0 {
		t.Errorf("%d leftover shards after the writes", n)
	}
	// And what it wrote loads.
	e.takesOverAll(t, r)
}

// A journal segment already at the next one's name (a writer killed after
// creating it, or a fenced one's) turns that write into a snapshot, and the
// leftover is deleted; the journal goes on after it.
func TestJournalSkipsLeftoverSegments(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	r, idx := e.writtenReplica(t, checkpoint.DefaultJournalSegments)
	gen := string(idx.Data["generation"])
	left := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "leases-" + gen + "-j1", Namespace: e.ns,
		Labels: map[string]string{"app.kubernetes.io/component": "lease-checkpoint"}}, Data: map[string][]byte{"checkpoint.json.gz": []byte("stale")}}
	if _, err := e.kube.CoreV1().Secrets(e.ns).Create(ctx, left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var gens, journals []string
	for i := range 3 {
		churn(t, r.store, rand.New(rand.NewPCG(3, uint64(i))), 5, fmt.Sprintf("y%d", i), nil)
		if err := r.cp.WriteIfChanged(ctx); err != nil {
			t.Fatalf("write %d after a leftover segment appeared: %v", i, err)
		}
		cur, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gens, journals = append(gens, string(cur.Data["generation"])), append(journals, string(cur.Data["journal"]))
	}
	if gens[0] == gen || journals[0] != "0" || journals[1] != "1" || journals[2] != "2" || gens[2] != gens[0] {
		t.Errorf("generations %v, journals %v after a leftover segment of generation %s; want a snapshot, then the journal after it", gens, journals, gen)
	}
	if n := e.leftoverShards(t); n != 0 {
		t.Errorf("%d leftover shards after the writes", n)
	}
	e.takesOverAll(t, r)
}

// A shard that cannot be read for a moment (a 500) is retried: the replica
// taking over loads every lease rather than serving an empty store (today's
// TakeOver called it corrupt and served without it). A shard that is
// really gone is corrupt: the store then serves without it, and reclaim
// stays possible.
func TestTakeoverTellsABlipFromCorruption(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	r, idx := e.writtenReplica(t, checkpoint.DefaultJournalSegments)
	shard := fmt.Sprintf("leases-%s-1", idx.Data["generation"])

	blip := e.faultReplica(t, "blip", 2)
	blip.ft.mu.Lock()
	blip.ft.failPath, blip.ft.failN = "/"+shard, 3
	blip.ft.mu.Unlock()
	if err := blip.cp.TakeOver(ctx, synced, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := len(blip.store.List("")), len(r.store.List("")); got != want {
		t.Fatalf("after a blip on shard %s: %d leases loaded, want %d", shard, got, want)
	}
	if blip.ft.failN != 0 {
		t.Fatalf("the blip was not injected (%d left)", blip.ft.failN)
	}

	// Really gone: corrupt, served without.
	if err := e.kube.CoreV1().Secrets(e.ns).Delete(ctx, shard, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := e.faultReplica(t, "gone", 3)
	if err := gone.cp.TakeOver(ctx, synced, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(gone.store.List("")); n != 0 {
		t.Errorf("a checkpoint missing a shard restored %d leases", n)
	}
}
