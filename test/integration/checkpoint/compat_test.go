package checkpoint

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"
)

// v1FixtureTime is the store's clock when testdata/v1 was written: by
// TestWriteV1Fixture (removed since) at commit ce2f5ac, the last release
// before the journal, from fill(store, 12, 40, 0).
var v1FixtureTime = time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)

// stateSummary is what a checkpoint must bring back, in a form that
// compares and prints plainly.
type stateSummary struct {
	Revision  uint64            `json:"revision"`
	Leases    map[string]string `json:"leases"` // ID → namespace/name on proxy, holder, expiry, labels, extra's name
	Cooldowns []string          `json:"cooldowns"`
	Ended     []string          `json:"ended"`
}

func summarize(st lease.State) stateSummary {
	out := stateSummary{Revision: st.Revision, Leases: map[string]string{}}
	for _, l := range st.Leases {
		extra := ""
		if x, ok := l.Meta.Extra.(interface{ GetName() string }); ok {
			extra = x.GetName()
		}
		out.Leases[l.ID] = strings.Join([]string{l.Namespace + "/" + l.Name, l.Proxy.Namespace + "/" + l.Proxy.Name, l.Holder, l.Flow, l.Target,
			l.ExpiresAt.UTC().Format(time.RFC3339Nano), l.LastResult, formatMap(l.Meta.Labels), formatMap(l.Meta.Annotations), extra}, " ")
	}
	for _, c := range st.Cooldowns {
		out.Cooldowns = append(out.Cooldowns, c.Proxy.String()+" "+c.Target+" "+c.Until.UTC().Format(time.RFC3339Nano)+" "+c.Holder)
	}
	for _, e := range st.Ended {
		out.Ended = append(out.Ended, e.ID+" "+e.Name.String()+" "+e.Proxy.String()+" "+e.Target+" "+e.Holder+" "+string(e.Reason)+" "+e.Until.UTC().Format(time.RFC3339Nano))
	}
	slices.Sort(out.Cooldowns)
	slices.Sort(out.Ended)
	return out
}

func formatMap(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return "{" + strings.Join(kv, ",") + "}"
}

// TestUpgradeFromV1AndBack: a new leader takes over the checkpoint the
// release before the journal wrote (testdata/v1: its Secrets, and the state
// they hold) with every lease, cooldown and ended lease; and what the new
// release leaves after a graceful shutdown (its last write, a snapshot) is
// read whole by that release's reader (v1Read), so a rolling downgrade
// keeps every lease too. A downgrade after a crash does not: the older
// release ignores the journal (shown below).
func TestUpgradeFromV1AndBack(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	var secrets []corev1.Secret
	readJSON(t, "testdata/v1/secrets.json", &secrets)
	var want stateSummary
	readJSON(t, "testdata/v1/state.json", &want)
	for _, s := range secrets {
		s.Namespace = e.ns
		if _, err := e.kube.CoreV1().Secrets(e.ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clk := clocktesting.NewFakeClock(v1FixtureTime.Add(3 * time.Minute))
	store := newStore(t, clk)
	fill(t, store, 12, 0, 0) // the fixture's proxies, as the informer feeds them
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace = "leases", e.ns
	// The real clock: the takeover gives the old writer's unfinished write
	// its grace.
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: e.kube.CoreV1(), Store: store, Codec: proxylease.MetadataCodec{}, Identity: "new"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.TakeOver(ctx, synced, nil); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, summarize(stateOf(store))); d != "" {
		t.Fatalf("the release before's checkpoint, taken over (-written +restored):\n%s", d)
	}
	if got := c.RVBase(1); got != 1780000000000000 {
		t.Errorf("resourceVersion base %d, want the checkpoint's", got)
	}

	// The new release writes: a snapshot of its layout, then a journal.
	l, err := store.Acquire(lease.AcquireRequest{Target: "after-upgrade", TTL: time.Hour, Holder: "h9"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	store.Release(l.ID)
	for _, live := range store.List("")[:3] {
		store.Release(live.ID)
	}
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	idx, _ := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "leases", metav1.GetOptions{})
	if string(idx.Data["journal"]) != "1" || len(idx.Data["checkpoint.json.gz"]) != 0 {
		t.Fatalf("after two writes: journal %q, %d payload bytes in the index; want a journal of 1 and the payload in shards", idx.Data["journal"], len(idx.Data["checkpoint.json.gz"]))
	}
	// The older release, started now (after a crash), reads the snapshot
	// and not the journal: the four releases are missing.
	if got, cur := v1Read(t, e, "leases"), v1SummaryOf(stateOf(store)); cmp.Equal(got, cur) {
		t.Error("the older release read the journal's changes: this check shows nothing")
	}
	// A graceful shutdown writes a snapshot: the older release reads it whole.
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(v1SummaryOf(stateOf(store)), v1Read(t, e, "leases")); d != "" {
		t.Errorf("the older release's reader after the new one's shutdown (-state +read):\n%s", d)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// v1Summary is what the release before the journal reads of a checkpoint.
type v1Summary struct {
	Revision uint64
	Leases   []string // ID on proxy
	Cools    []string
	Ended    []string
}

func (s v1Summary) sorted() v1Summary {
	slices.Sort(s.Leases)
	slices.Sort(s.Cools)
	slices.Sort(s.Ended)
	return s
}

func v1SummaryOf(st lease.State) v1Summary {
	out := v1Summary{Revision: st.Revision}
	for _, l := range st.Leases {
		out.Leases = append(out.Leases, l.ID+" "+l.Proxy.Name)
	}
	for _, c := range st.Cooldowns {
		out.Cools = append(out.Cools, c.Proxy.Name+" "+c.Target)
	}
	for _, e := range st.Ended {
		out.Ended = append(out.Ended, e.ID)
	}
	return out.sorted()
}

// v1Read reads the checkpoint as the release before the journal did
// (pkg/checkpoint at the commit that wrote testdata/v1, frozen here): the
// index's payload, then its shards <name>-<generation>-<i> for i below
// "shards", the whole checked against "sha256", one document of version 1.
func v1Read(t *testing.T, e *env, name string) v1Summary {
	t.Helper()
	ctx := context.Background()
	index, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shards, err := strconv.Atoi(string(index.Data["shards"]))
	if err != nil || shards < 1 {
		t.Fatalf("v1 reader: shard count %q", index.Data["shards"])
	}
	payload := bytes.Clone(index.Data["checkpoint.json.gz"])
	for i := 1; i < shards; i++ {
		s, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, fmt.Sprintf("%s-%s-%d", name, index.Data["generation"], i), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("v1 reader: %v", err)
		}
		payload = append(payload, s.Data["checkpoint.json.gz"]...)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != string(index.Data["sha256"]) {
		t.Fatal("v1 reader: digest mismatch")
	}
	zr, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version  int    `json:"version"`
		Revision uint64 `json:"revision"`
		Proxies  []struct {
			Name string `json:"name"`
		} `json:"proxies"`
		Leases []struct {
			ID    string `json:"id"`
			Proxy int    `json:"proxy"`
		} `json:"leases"`
		Cooldowns []struct {
			Proxy  string `json:"proxy"`
			Target string `json:"target"`
		} `json:"cooldowns"`
		Ended []struct {
			ID string `json:"id"`
		} `json:"ended"`
	}
	if err := json.NewDecoder(zr).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Version != 1 {
		t.Fatalf("v1 reader: format version %d", doc.Version)
	}
	out := v1Summary{Revision: doc.Revision}
	for _, l := range doc.Leases {
		out.Leases = append(out.Leases, l.ID+" "+doc.Proxies[l.Proxy].Name)
	}
	for _, c := range doc.Cooldowns {
		out.Cools = append(out.Cools, c.Proxy+" "+c.Target)
	}
	for _, e := range doc.Ended {
		out.Ended = append(out.Ended, e.ID)
	}
	return out.sorted()
}
