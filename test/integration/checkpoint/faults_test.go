package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

// faultReplica is one operator process: its store (fed the fleet, as the
// informer would), its checkpointer and the transport its client goes
// through.
type faultReplica struct {
	store *lease.Store
	cp    *checkpoint.Checkpointer
	ft    *faultTransport
}

const (
	// faultJournal segments between snapshots: the faults meet journal
	// writes and snapshots alike.
	faultJournal  = 3
	faultProxies  = 24000
	faultLeases   = 20000
	faultCooldown = 20000
)

func (e *env) faultReplica(t *testing.T, identity string, seed uint64) *faultReplica {
	t.Helper()
	return e.faultReplicaJournal(t, identity, seed, checkpoint.DefaultJournalSegments)
}

// faultReplicaJournal is faultReplica whose checkpointer keeps at most
// journal segments between snapshots (0: every write a snapshot).
func (e *env) faultReplicaJournal(t *testing.T, identity string, seed uint64, journal int) *faultReplica {
	t.Helper()
	// Signed IDs, as the operator's: a checkpoint of them is mostly IDs.
	signer := leaseid.NewSigner()
	if err := signer.SetKey([]byte(strings.Repeat("k", leaseid.KeySize))); err != nil {
		t.Fatal(err)
	}
	store, err := lease.New(lease.Options{MaxLeasesPerProxy: 1, MaxTTL: 2 * time.Hour, CooldownWindow: 30 * time.Minute, IDs: signer,
		// 20 holders run the cooldowns of a fleet-sized crawl between them.
		MaxCooldownsPerHolder: 1 << 20}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range faultProxies {
		name := fmt.Sprintf("p%05d", i)
		store.UpsertProxy(lease.ProxyInfo{Namespace: "crawl", Name: name, URL: "http://127.0.0.2:3128", Healthy: true, Attributes: map[string]string{"id": name}})
	}
	kube, ft := e.faultClient(t, seed)
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace, o.JournalSegments = "leases", e.ns, journal
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: kube.CoreV1(), Store: store, Codec: proxylease.MetadataCodec{}, Identity: identity})
	if err != nil {
		t.Fatal(err)
	}
	return &faultReplica{store: store, cp: c, ft: ft}
}

// snapshot is what a checkpoint must bring back: the live lease IDs and
// the cooling (proxy, target) pairs.
type snapshot struct {
	leases map[string]string // ID → proxy
	cools  map[string]bool
}

func snap(s *lease.Store) snapshot {
	st := stateOf(s)
	out := snapshot{leases: make(map[string]string, len(st.Leases)), cools: make(map[string]bool, len(st.Cooldowns))}
	for _, l := range st.Leases {
		out.leases[l.ID] = l.Proxy.Name
	}
	for _, c := range st.Cooldowns {
		out.cools[c.Proxy.String()+"|"+c.Target] = true
	}
	return out
}

func (s snapshot) equal(o snapshot) bool {
	if len(s.leases) != len(o.leases) || len(s.cools) != len(o.cools) {
		return false
	}
	for id := range s.leases {
		if _, ok := o.leases[id]; !ok {
			return false
		}
	}
	for k := range s.cools {
		if !o.cools[k] {
			return false
		}
	}
	return true
}

// clients is the history of the crawlers that hold the leases: each lease
// is a client's from its grant to its release (a lease a crash lost is
// still held by its client, which does not know), in the form the
// failover tests' checker reads (framework.CheckHistory).
type clients struct {
	held map[string]*framework.Grant // by lease ID
	done []framework.Grant
}

func (c *clients) got(l *lease.Lease) {
	c.held[l.ID] = &framework.Grant{ID: l.ID, Proxy: l.Proxy.Name, Got: time.Now()}
}

func (c *clients) released(id string) {
	if g, ok := c.held[id]; ok {
		g.Ended = time.Now()
		c.done = append(c.done, *g)
		delete(c.held, id)
	}
}

// probe has another client ask the leader for each proxy a client believes
// it holds: a grant there is a proxy given out twice (the checker decides
// whether a crash explains it). The client whose lease is gone learns it
// (its next renew says so) a moment later.
func (c *clients) probe(s *lease.Store) {
	for id, g := range c.held {
		l, err := s.Acquire(lease.AcquireRequest{Selector: map[string]string{"id": g.Proxy}, TTL: time.Minute, Holder: "prober"})
		if err != nil {
			continue
		}
		now := time.Now()
		s.Release(l.ID)
		lostGrant := *g
		lostGrant.Ended = now.Add(time.Millisecond)
		c.done = append(c.done, framework.Grant{ID: l.ID, Proxy: l.Proxy.Name, Got: now, Ended: now}, lostGrant)
		delete(c.held, id)
	}
}

// history is every grant, those still held ending now.
func (c *clients) history() []framework.Grant {
	out := slices.Clone(c.done)
	for _, g := range c.held {
		h := *g
		h.Ended = time.Now()
		out = append(out, h)
	}
	return out
}

// churn releases n live leases, grants n new ones and reports n new
// cooldowns, as clients (cs; nil: none records it) would.
func churn(t *testing.T, s *lease.Store, rng *rand.Rand, n int, tag string, cs *clients) {
	t.Helper()
	live := s.List("")
	for range min(n, len(live)) {
		i := rng.IntN(len(live))
		s.Release(live[i].ID)
		if cs != nil {
			cs.released(live[i].ID)
		}
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	for i := range n {
		l, err := s.Acquire(lease.AcquireRequest{Target: fmt.Sprintf("site-%d", i%50), TTL: time.Hour, Holder: fmt.Sprintf("h%d", i%20), Flow: fmt.Sprintf("h%d", i%20)})
		if err != nil {
			t.Fatalf("churn acquire: %v", err)
		}
		if cs != nil {
			cs.got(l)
		}
		if err := s.Report(l.ID, lease.ResultRateLimited, fmt.Sprintf("%s-%d", tag, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// faultRun is what a run of the fault-injection test found.
type faultRun struct {
	points, kills, faultWrites, fenced int
	injected                           int
	// history is what the failover tests' checker found in the clients'
	// history: Planned are proxies given out twice unexplained by a crash
	// (a checkpointed lease lost), Crash those of leases granted just
	// before a kill (not checkpointed yet). lost are checkpointed leases
	// missing after a takeover; mixed are takeovers whose state is neither
	// the last acknowledged checkpoint nor the one being written; stuck are
	// writers that could not write once the faults stopped.
	history            framework.HistoryResult
	lost, mixed, stuck int
	takeovers          []time.Duration
	shards             int
}

func (r faultRun) String() string {
	slices.Sort(r.takeovers)
	med, p90, top := time.Duration(0), time.Duration(0), time.Duration(0)
	if n := len(r.takeovers); n > 0 {
		med, p90, top = r.takeovers[n/2], r.takeovers[n*9/10], r.takeovers[n-1]
	}
	return fmt.Sprintf("%d fault points (%d kills inside a write, %d writes under transient faults, %d fenced old leaders; %d faults injected), %d shards: "+
		"%d proxies granted twice (history checker; %d more of leases granted just before a kill), %d checkpointed leases lost, %d mixed states, %d stuck writers; takeover (under faults) median %s, p90 %s, max %s",
		r.points, r.kills, r.faultWrites, r.fenced, r.injected, r.shards, r.history.Planned, r.history.Crash, r.lost, r.mixed, r.stuck,
		med.Round(time.Millisecond), p90.Round(time.Millisecond), top.Round(time.Millisecond))
}

// shardCount is how many Secrets the checkpoint spans now.
func (e *env) shardCount(t *testing.T) int {
	t.Helper()
	idx, err := e.kube.CoreV1().Secrets(e.ns).Get(context.Background(), "leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(string(idx.Data["shards"]))
	return n
}

// leftoverShards counts shard and journal Secrets the index does not name.
func (e *env) leftoverShards(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	idx, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.kube.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: componentLabel})
	if err != nil {
		t.Fatal(err)
	}
	prefix := "leases-" + string(idx.Data["generation"]) + "-"
	journal, _ := strconv.Atoi(string(idx.Data["journal"]))
	n := 0
	for _, s := range list.Items {
		rest, ours := strings.CutPrefix(s.Name, prefix)
		seq, segment := strings.CutPrefix(rest, "j")
		named := s.Name == "leases" || ours && !segment
		if ours && segment {
			k, err := strconv.Atoi(seq)
			named = err == nil && k <= journal
		}
		if !named {
			n++
		}
	}
	return n
}

// runFaults runs points fault points against one checkpoint of ≥ 3 shards.
// Each point lets the serving replica churn and write with a fault: killed
// after a random number of Secret requests of the write (inside the shard
// creates, around the index update, inside the old shards' deletion), or
// writing under transient faults until a write lands, or left running
// while another replica takes over and then writing (a fenced leader's
// leftovers). Then a new replica takes over, its own reads under transient
// faults, and the checker compares what it restored with what was
// checkpointed, and has it write once the faults stop.
func runFaults(t *testing.T, e *env, seed uint64, points int) faultRun {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx := context.Background()
	cur := e.faultReplicaJournal(t, "r0", seed, faultJournal)
	cs := &clients{held: map[string]*framework.Grant{}}
	var kills []framework.Kill
	for i := range faultLeases {
		l, err := cur.store.Acquire(lease.AcquireRequest{Target: fmt.Sprintf("site-%d", i%50), TTL: time.Hour, Holder: fmt.Sprintf("h%d", i%20), Flow: fmt.Sprintf("h%d", i%20)})
		if err != nil {
			t.Fatal(err)
		}
		cs.got(l)
		if i < faultCooldown {
			if err := cur.store.Report(l.ID, lease.ResultRateLimited, fmt.Sprintf("seed-%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cur.cp.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	lastAck := time.Now()
	run := faultRun{shards: e.shardCount(t)}
	if run.shards < 3 {
		t.Fatalf("the checkpoint spans %d Secrets, want ≥ 3", run.shards)
	}
	acked := snap(cur.store) // as the last acknowledged write left it
	for k := range points {
		run.points++
		churn(t, cur.store, rng, 50, fmt.Sprintf("k%d", k), cs)
		attempted := snap(cur.store)
		candidates := []snapshot{acked, attempted}
		fencedLeader := false
		switch kind := rng.IntN(5); {
		case kind < 2: // killed inside a write
			run.kills++
			cur.ft.set(rng.IntN(2*run.shards+2), 0)
			if cur.cp.WriteIfChanged(ctx) == nil {
				candidates, lastAck = []snapshot{attempted}, time.Now()
			}
			cur.ft.set(0, 0)
			kills = append(kills, framework.Kill{At: time.Now(), Signal: "SIGKILL", Window: time.Since(lastAck)})
		case kind < 4: // transient faults until a write lands, then a crash
			run.faultWrites++
			cur.ft.set(-1, 0.3)
			landed := false
			for range 40 {
				if cur.cp.WriteIfChanged(ctx) == nil {
					landed, lastAck = true, time.Now()
					break
				}
			}
			cur.ft.set(-1, 0)
			if !landed && cur.cp.WriteIfChanged(ctx) != nil && cur.cp.WriteIfChanged(ctx) != nil {
				run.stuck++
				t.Errorf("point %d: the writer cannot write once the faults stopped", k)
			} else {
				candidates = []snapshot{attempted}
			}
			cur.ft.set(0, 0)
			kills = append(kills, framework.Kill{At: time.Now(), Signal: "SIGKILL", Window: time.Since(lastAck)})
		default: // a fenced old leader: it writes after the takeover's fence
			run.fenced++
			fencedLeader = true
			if err := cur.cp.WriteIfChanged(ctx); err != nil {
				t.Fatalf("point %d: %v", k, err)
			}
			candidates = []snapshot{attempted}
			kills = append(kills, framework.Kill{At: time.Now(), Signal: "fenced"})
		}
		// What was certainly checkpointed: the first candidate.
		checkpointed := candidates[0]
		// The next replica is made after the write (feeding it 24,000
		// proxies takes a while): a kill follows its churn within the
		// checker's crash window.
		next := e.faultReplicaJournal(t, fmt.Sprintf("r%d", k+1), seed+uint64(k)+1, faultJournal)

		next.ft.set(-1, 0.2) // a blip while loading
		start := time.Now()
		tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := next.cp.TakeOver(tctx, synced, nil)
		cancel()
		run.takeovers = append(run.takeovers, time.Since(start))
		next.ft.set(-1, 0)
		if err != nil {
			t.Fatalf("point %d: takeover: %v", k, err)
		}
		if fencedLeader {
			// The fenced leader's writer still writes: its shards are left
			// over. (Its lease APIs closed when it lost the leadership,
			// before the takeover: nobody holds what it grants here.)
			churn(t, cur.store, rng, 10, fmt.Sprintf("z%d", k), nil)
			if err := cur.cp.WriteIfChanged(ctx); !checkpoint.IsFenced(err) {
				t.Errorf("point %d: the old leader's write after the takeover: %v, want fenced", k, err)
			}
			cur.ft.set(0, 0)
		}

		got := snap(next.store)
		match := -1
		for i, c := range candidates {
			if got.equal(c) {
				match = i
			}
		}
		if match < 0 {
			run.mixed++
			for id := range checkpointed.leases {
				if _, ok := got.leases[id]; !ok {
					run.lost++
				}
			}
			t.Errorf("point %d: restored %d leases and %d cooldowns; checkpointed %d and %d, being written %d and %d",
				k, len(got.leases), len(got.cools), len(checkpointed.leases), len(checkpointed.cools), len(attempted.leases), len(attempted.cools))
		}
		// Every proxy a client believes it holds is asked for.
		cs.probe(next.store)

		// The new leader writes at once, whatever was left behind, and
		// leaves no shard the index does not name.
		churn(t, next.store, rng, 5, fmt.Sprintf("n%d", k), cs)
		if err := next.cp.WriteIfChanged(ctx); err != nil {
			if err := next.cp.WriteIfChanged(ctx); err != nil {
				run.stuck++
				t.Errorf("point %d: the new leader cannot write: %v", k, err)
			}
		}
		lastAck = time.Now()
		if n := e.leftoverShards(t); n > 0 {
			t.Errorf("point %d: %d leftover shards after the new leader's write", k, n)
		}
		acked = snap(next.store)
		f, _ := cur.ft.counts()
		g, _ := next.ft.counts()
		run.injected += f + g
		cur = next
	}
	// Every kill says when the last write was acknowledged: what was
	// granted since may be lost, nothing before.
	run.history = framework.CheckHistory(cs.history(), kills, 0)
	return run
}

// TestCheckpointUnderFaults: ≥ 3-shard checkpoints (20,000 leases, 20,000
// cooldowns) written under kills, transient faults and fenced writers, each
// followed by a takeover that itself reads under faults: no proxy granted
// twice, no checkpointed lease lost, no stuck writer, no leftover shard.
// CHECKPOINT_FAULT_POINTS (default 6; make checkpoint-faults: 60) sets the
// points, CHECKPOINT_FAULT_SEED=<n> repeats a run.
func TestCheckpointUnderFaults(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHECKPOINT_FAULT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHECKPOINT_FAULT_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("CHECKPOINT_FAULT_SEED=%d repeats this run", seed)
	points := 6
	if s := os.Getenv("CHECKPOINT_FAULT_POINTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CHECKPOINT_FAULT_POINTS=%q: want a positive number", s)
		}
		points = n
	}
	e := setup(t)
	r := runFaults(t, e, seed, points)
	t.Log(r)
	if r.injected == 0 {
		t.Error("no fault was injected: the run shows nothing")
	}
	if r.history.Grants < faultLeases+50*points {
		t.Errorf("the history has %d grants: the clients were not recorded", r.history.Grants)
	}
	if r.history.Planned+r.lost+r.mixed+r.stuck > 0 {
		t.Errorf("%s", r)
	}
}
