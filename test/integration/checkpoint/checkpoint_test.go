package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

const componentLabel = "app.kubernetes.io/component=lease-checkpoint"

type env struct {
	kube kubernetes.Interface
	cfg  *rest.Config
	ns   string
}

// shared is the package's one control plane; each test writes into a
// namespace of its own.
var shared = controlplane.NewShared(controlplane.Options{SkipCRDs: true})

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, "checkpoint", func(_ context.Context, e *framework.Env) error {
		e.Share(shared)
		return nil
	}))
}

func setup(t *testing.T) *env {
	t.Helper()
	cp := shared.Get(t)
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &env{kube: kube, cfg: cp.RESTConfig(), ns: shared.Namespace(t, "operator")}
}

func newStore(t *testing.T, clk *clocktesting.FakeClock) *lease.Store {
	t.Helper()
	s, err := lease.New(lease.Options{MaxLeasesPerProxy: 4, MaxTTL: 2 * time.Hour, CooldownWindow: 30 * time.Minute}, clk)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) checkpointer(t *testing.T, store checkpoint.Store, clk *clocktesting.FakeClock, name string) *checkpoint.Checkpointer {
	t.Helper()
	return e.recordedCheckpointer(t, store, clk, name, nil)
}

// recordedCheckpointer is checkpointer with rec (nil: none) as its Recorder.
func (e *env) recordedCheckpointer(t *testing.T, store checkpoint.Store, clk *clocktesting.FakeClock, name string, rec checkpoint.Recorder) *checkpoint.Checkpointer {
	t.Helper()
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace = name, e.ns
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: e.kube.CoreV1(), Store: store, Codec: proxylease.MetadataCodec{}, Clock: clk, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fill gives the store proxies, leases (some with a ProxyLease template and
// an incompressible annotation of pad bytes), cooldowns and ended leases.
func fill(t *testing.T, s *lease.Store, proxies, leases, pad int) {
	t.Helper()
	for i := range proxies {
		host := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
		s.UpsertProxy(lease.ProxyInfo{Namespace: "crawl", Name: fmt.Sprintf("p%04d", i), URL: "http://" + host + ":3128", Host: host, Port: 3128,
			Attributes: map[string]string{"tier": []string{"gold", "standard"}[i%2]}, Healthy: true})
	}
	for i := range leases {
		req := lease.AcquireRequest{Target: fmt.Sprintf("site-%d", i%7), TTL: time.Duration(10+i%50) * time.Minute, Holder: fmt.Sprintf("h%d", i%5), Flow: fmt.Sprintf("h%d", i%5)}
		if i%3 == 0 {
			tmpl := &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pl-%d", i), Namespace: "crawl", UID: "u"},
				Spec: leasingv1alpha1.ProxyLeaseSpec{Selector: map[string]string{"tier": "gold"}, Target: req.Target}}
			req.Name = tmpl.Name
			req.Meta = lease.Metadata{Labels: map[string]string{"app": "crawler"}, Extra: tmpl}
			if pad > 0 {
				b := make([]byte, pad)
				_, _ = rand.Read(b)
				req.Meta.Annotations = map[string]string{"pad": hex.EncodeToString(b)}
			}
		}
		l, err := s.Acquire(req)
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		switch i % 10 {
		case 1:
			if err := s.Report(l.ID, lease.ResultRateLimited, ""); err != nil {
				t.Fatal(err)
			}
		case 2:
			s.Release(l.ID)
		}
	}
}

// TestWritesOnlyWhatChanged: the first write creates the Secret; without a
// change nothing is written; a change is written by the loop at its next
// tick, many changes in one interval as one write.
func TestWritesOnlyWhatChanged(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	store := newStore(t, clk)
	fill(t, store, 10, 20, 0)
	rec := &recorder{}
	c := e.recordedCheckpointer(t, store, clk, "leases", rec)
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	again, _ := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if rec.written() != 1 || again.ResourceVersion != first.ResourceVersion {
		t.Fatalf("unchanged store: %d writes, resourceVersion %s → %s", rec.written(), first.ResourceVersion, again.ResourceVersion)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Start(runCtx) }()
	tick := func() {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return clk.HasWaiters(), nil
		}); err != nil {
			t.Fatal("the checkpoint loop is not waiting on its ticker")
		}
		clk.Step(checkpoint.DefaultInterval)
	}
	for range 5 {
		if _, err := store.Acquire(lease.AcquireRequest{Target: "burst"}); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return rec.written() == 2, nil
	}); err != nil {
		t.Fatalf("five changes then a tick: %d writes, want 2", rec.written())
	}
	// The five changes went into the journal: one segment, the snapshot
	// untouched.
	idx, _ := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if string(idx.Data["generation"]) != "1" || string(idx.Data["journal"]) != "1" {
		t.Errorf("after a change: generation %s, journal %s; want 1 and 1", idx.Data["generation"], idx.Data["journal"])
	}
	if _, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases-1-j1", metav1.GetOptions{}); err != nil {
		t.Errorf("the journal segment: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	// With nothing new, the last write folds the journal into a snapshot
	// (a successor, or the release before the journal, reads one
	// snapshot) and is marked final, so that the next leader need not
	// wait.
	last, _ := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if rec.written() != 3 || last.Annotations["leasing.crawl.example.com/checkpoint-final"] != "true" ||
		string(last.Data["generation"]) != "2" || string(last.Data["journal"]) != "0" {
		t.Errorf("after shutdown: %d writes, annotations %v, generation %s, journal %s; want 3, final, generation 2, journal 0",
			rec.written(), last.Annotations, last.Data["generation"], last.Data["journal"])
	}
	if left := e.checkpointSecrets(t, "leases"); !slices.Equal(left, []string{"leases", "leases-2-1"}) {
		t.Errorf("after shutdown the checkpoint is %v, want the index and one shard", left)
	}

	// A shutdown with an empty journal and nothing new only marks it final.
	runCtx, cancel = context.WithCancel(ctx)
	cancel()
	if err := c.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	again, _ = e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if rec.written() != 3 || string(again.Data["generation"]) != "2" {
		t.Errorf("a second shutdown with nothing new: %d writes, generation %s; want 3 and 2", rec.written(), again.Data["generation"])
	}
}

// checkpointSecrets lists the names of the checkpoint name's Secrets.
func (e *env) checkpointSecrets(t *testing.T, name string) []string {
	t.Helper()
	list, err := e.kube.CoreV1().Secrets(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: componentLabel})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Items {
		if s.Name == name || strings.HasPrefix(s.Name, name+"-") {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return names
}

// TestRoundTrip: a checkpoint too large for one Secret is sharded, loads into
// a new store as the same state with the same resourceVersion base, and a
// smaller checkpoint afterwards leaves no old shard behind.
func TestRoundTrip(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	store := newStore(t, clk)
	fill(t, store, 500, 1800, 1024) // ~1.2 MiB of incompressible annotations
	c := e.checkpointer(t, store, clk, "leases")
	base := c.RVBase(123456)
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	shards, err := e.kube.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: componentLabel})
	if err != nil {
		t.Fatal(err)
	}
	if len(shards.Items) < 2 {
		t.Fatalf("%d checkpoint Secrets for ~1.2 MiB, want it sharded", len(shards.Items))
	}
	for _, s := range shards.Items {
		size := 0
		for _, v := range s.Data {
			size += len(v)
		}
		if size >= 1<<20 {
			t.Errorf("Secret %s holds %d bytes, over the 1 MiB limit", s.Name, size)
		}
	}

	want := stateOf(store)
	restored := newStore(t, clk)
	c2 := e.checkpointer(t, restored, clk, "leases")
	loaded, err := c2.Load(ctx)
	if err != nil || !loaded {
		t.Fatalf("Load: %v %v", loaded, err)
	}
	got := stateOf(restored)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("restored state (-want +got):\n%s", d)
	}
	if c2.RVBase(999) != base {
		t.Errorf("resourceVersion base %d after the load, want the checkpoint's %d", c2.RVBase(999), base)
	}
	var templates int
	for _, l := range got.Leases {
		if tmpl, ok := l.Meta.Extra.(*leasingv1alpha1.ProxyLease); ok && tmpl.Spec.Selector["tier"] == "gold" {
			templates++
		}
	}
	if templates == 0 {
		t.Error("no ProxyLease template came back")
	}

	// Fewer leases: the first write after the load is a snapshot of the
	// loader's own, the next one's releases go into the journal, and a
	// third replica loads the snapshot and the journal as the same state.
	live := restored.List("")
	for i, l := range live {
		restored.Release(l.ID)
		if i == len(live)/2 {
			if err := c2.WriteIfChanged(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c2.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	idx, _ := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if string(idx.Data["generation"]) != "2" || string(idx.Data["journal"]) != "1" {
		t.Errorf("generation %s, journal %s after the releases, want 2 and 1", idx.Data["generation"], idx.Data["journal"])
	}
	third := newStore(t, clk)
	if loaded, err := e.checkpointer(t, third, clk, "leases").Load(ctx); err != nil || !loaded {
		t.Fatalf("Load of the snapshot and the journal: %v %v", loaded, err)
	}
	if d := cmp.Diff(stateOf(restored), stateOf(third)); d != "" {
		t.Errorf("restored from the snapshot and the journal (-want +got):\n%s", d)
	}
	// The last write is a snapshot: one shard again, the old shards and
	// the journal deleted.
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c2.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	if after := e.checkpointSecrets(t, "leases"); len(after) != 2 {
		t.Errorf("checkpoint Secrets after shrinking: %v, want the index and one shard (old shards and the journal deleted)", after)
	}
}

// TestTamperedCheckpointIsRefused: a changed shard is caught by the digest
// and nothing is restored.
func TestTamperedCheckpointIsRefused(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	store := newStore(t, clk)
	fill(t, store, 10, 20, 0)
	if err := e.checkpointer(t, store, clk, "leases").WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases-1-1", metav1.GetOptions{})
	s.Data["checkpoint.json.gz"][10] ^= 0xff
	if _, err := e.kube.CoreV1().Secrets(e.ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	restored := newStore(t, clk)
	loaded, err := e.checkpointer(t, restored, clk, "leases").Load(ctx)
	if loaded || !checkpoint.IsCorrupt(err) {
		t.Fatalf("tampered checkpoint: loaded %v, %v; want a corrupt-checkpoint error", loaded, err)
	}
	if n := len(restored.List("")); n != 0 {
		t.Errorf("%d leases restored from a tampered checkpoint", n)
	}

	// A journal segment changed, missing, or a journal longer than any
	// writer keeps: refused too.
	c := e.checkpointer(t, store, clk, "journaled")
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Acquire(lease.AcquireRequest{Target: "journaled"}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	secrets := e.kube.CoreV1().Secrets(e.ns)
	for _, tc := range []struct {
		name   string
		tamper func(index, segment *corev1.Secret)
	}{
		{"segment changed", func(_, seg *corev1.Secret) { seg.Data["checkpoint.json.gz"][10] ^= 0xff }},
		{"segment missing", func(_, seg *corev1.Secret) { seg.Name = "" }},
		{"journal too long", func(idx, _ *corev1.Secret) { idx.Data["journal"] = []byte("99999999999") }},
	} {
		idx, err := secrets.Get(ctx, "journaled", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seg, err := secrets.Get(ctx, "journaled-1-j1", metav1.GetOptions{})
		if err != nil || string(idx.Data["journal"]) != "1" {
			t.Fatalf("%s: the journal is %q, segment: %v", tc.name, idx.Data["journal"], err)
		}
		origIdx, origSeg := idx.DeepCopy(), seg.DeepCopy()
		tc.tamper(idx, seg)
		switch {
		case seg.Name == "":
			err = secrets.Delete(ctx, origSeg.Name, metav1.DeleteOptions{})
		case string(idx.Data["journal"]) != "1":
			_, err = secrets.Update(ctx, idx, metav1.UpdateOptions{})
		default:
			_, err = secrets.Update(ctx, seg, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := e.checkpointer(t, newStore(t, clk), clk, "journaled").Load(ctx)
		if loaded || !checkpoint.IsCorrupt(err) {
			t.Errorf("%s: loaded %v, %v; want a corrupt-checkpoint error", tc.name, loaded, err)
		}
		// Put it back for the next case.
		if seg.Name == "" {
			origSeg.ResourceVersion = ""
			_, err = secrets.Create(ctx, origSeg, metav1.CreateOptions{})
		} else if string(idx.Data["journal"]) != "1" {
			cur, _ := secrets.Get(ctx, "journaled", metav1.GetOptions{})
			origIdx.ResourceVersion = cur.ResourceVersion
			_, err = secrets.Update(ctx, origIdx, metav1.UpdateOptions{})
		} else {
			cur, _ := secrets.Get(ctx, origSeg.Name, metav1.GetOptions{})
			origSeg.ResourceVersion = cur.ResourceVersion
			_, err = secrets.Update(ctx, origSeg, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if loaded, err := e.checkpointer(t, newStore(t, clk), clk, "journaled").Load(ctx); !loaded || err != nil {
		t.Errorf("the journal put back: loaded %v, %v", loaded, err)
	}

	// No checkpoint at all: nothing loaded, no error.
	loaded, err = e.checkpointer(t, newStore(t, clk), clk, "none").Load(ctx)
	if loaded || err != nil {
		t.Errorf("no checkpoint: %v %v", loaded, err)
	}
}

// TestLastCheckpointAfterTheServers: at shutdown the last checkpoint waits
// for the servers to stop, so a change made while they drain is in it.
func TestLastCheckpointAfterTheServers(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	store := newStore(t, clk)
	fill(t, store, 10, 5, 0)
	c := e.checkpointer(t, store, clk, "leases")
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	serverStopped := make(chan struct{})
	c.FinalAfter(serverStopped)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Start(runCtx) }()
	cancel()
	// A request still draining: its lease must be in the last checkpoint.
	late, err := store.Acquire(lease.AcquireRequest{Target: "draining"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the last checkpoint did not wait for the server: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(serverStopped)
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	restored := newStore(t, clk)
	if _, err := e.checkpointer(t, restored, clk, "leases").Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := restored.Get(late.ID); !ok {
		t.Error("the lease granted while the server drained is not in the last checkpoint")
	}
}

// stateOf is the durable state of s with its leases in ID order, so that
// two equal stores compare equal.
func stateOf(s *lease.Store) lease.State {
	var st lease.State
	s.StateInto(&st)
	slices.SortFunc(st.Leases, func(a, b lease.Lease) int { return strings.Compare(a.ID, b.ID) })
	return st
}
