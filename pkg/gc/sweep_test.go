package gc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/gc"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
)

const (
	tag    = "proxy-operator"
	minAge = 10 * time.Minute
)

var now = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// recorder is a gc.Recorder that keeps what it was told.
type recorder struct {
	mu      sync.Mutex
	deleted map[string]int
	sweeps  []gc.Result
}

var _ gc.Recorder = (*recorder)(nil)

func (r *recorder) GCDeleted(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deleted == nil {
		r.deleted = map[string]int{}
	}
	r.deleted[p]++
}

func (r *recorder) GCSweep(res string, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweeps = append(r.sweeps, gc.Result(res))
}

func (r *recorder) sweepResults() []gc.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gc.Result(nil), r.sweeps...)
}

// lax lists every instance of its fake, whatever the tag and the
// unreachable scopes, and still reports the scopes unreachable: a provider
// whose server ignores the filter. The collector must not trust the listing
// alone.
type lax struct {
	*fake.Provider
	unreachable []string
}

func (l lax) ListByTag(context.Context, string) ([]provider.Instance, error) {
	insts := l.Instances()
	if len(l.unreachable) > 0 {
		return insts, provider.Incomplete(l.unreachable)
	}
	return insts, nil
}

type providers map[string]provider.Provider

func (p providers) All() map[string]provider.Provider { return p }

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func proxy(name string, uid types.UID, deleting bool) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid}}
	if deleting {
		p.Finalizers = []string{"crawl.example.com/instance"}
		p.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Minute)}
	}
	return p
}

// instance is a labelled instance of age old enough to collect unless a
// case changes it.
func instance(name string, uid types.UID, age time.Duration) provider.Instance {
	return provider.Instance{Name: name, Tag: tag, OwnerUID: uid, CreatedAt: now.Add(-age), Scope: "zone-a"}
}

func inScope(i provider.Instance, scope string) provider.Instance {
	i.Scope = scope
	return i
}

func TestSweep(t *testing.T) {
	errList := provider.Transient(errors.New("compute API down"))
	tests := []struct {
		name    string
		proxies []client.Object
		// planted per provider; providers are "a" (a fake) and, when
		// planted, "b".
		planted map[string][]provider.Instance
		// laxUnreachable makes provider "a" a lax one reporting these
		// scopes unreachable.
		laxUnreachable []string
		lax            bool
		unreachable    map[string][]string // per provider, on the fake
		listErr        map[string]error
		deleteErr      error
		proxyListErr   error
		dryRun         bool

		wantDeleted map[string][]string // provider → providerIDs gone
		wantOrphans int
		wantResult  gc.Result
		wantKept    map[gc.Verdict]int
	}{{
		name:        "an old labelled instance whose UID is no Proxy's is deleted",
		planted:     map[string][]provider.Instance{"a": {instance("orphan", "gone", time.Hour)}},
		wantDeleted: map[string][]string{"a": {"fake://orphan"}},
		wantOrphans: 1, wantResult: gc.ResultComplete,
	}, {
		name:       "unlabelled: no owner UID, no proof, kept",
		planted:    map[string][]provider.Instance{"a": {instance("stray", "", time.Hour)}},
		wantResult: gc.ResultComplete, wantKept: map[gc.Verdict]int{gc.KeepUnlabelled: 1},
	}, {
		name: "too young: one second under the minimum age is kept, the minimum age itself is collected",
		planted: map[string][]provider.Instance{"a": {
			instance("young", "gone-1", minAge-time.Second),
			instance("of-age", "gone-2", minAge),
		}},
		wantDeleted: map[string][]string{"a": {"fake://of-age"}},
		wantOrphans: 1, wantResult: gc.ResultComplete, wantKept: map[gc.Verdict]int{gc.KeepYoung: 1},
	}, {
		name:    "live UID: the instance of an existing Proxy is kept, its neighbour is not",
		proxies: []client.Object{proxy("p", "live", false)},
		planted: map[string][]provider.Instance{"a": {
			instance("owned", "live", time.Hour),
			instance("orphan", "gone", time.Hour),
		}},
		wantDeleted: map[string][]string{"a": {"fake://orphan"}},
		wantOrphans: 1, wantResult: gc.ResultComplete, wantKept: map[gc.Verdict]int{gc.KeepLive: 1},
	}, {
		name:       "a Proxy being deleted still owns its instance: its finalizer deletes it",
		proxies:    []client.Object{proxy("p", "deleting", true)},
		planted:    map[string][]provider.Instance{"a": {instance("owned", "deleting", time.Hour)}},
		wantResult: gc.ResultComplete, wantKept: map[gc.Verdict]int{gc.KeepLive: 1},
	}, {
		name:         "the Proxy list fails: the sweep is skipped, not one orphan deleted",
		planted:      map[string][]provider.Instance{"a": {instance("orphan", "gone", time.Hour)}},
		proxyListErr: errors.New("cache not synced"),
		wantResult:   gc.ResultSkipped,
	}, {
		name: "a provider whose listing fails is skipped; the next one is swept",
		planted: map[string][]provider.Instance{
			"a": {instance("orphan-a", "gone-a", time.Hour)},
			"b": {instance("orphan-b", "gone-b", time.Hour)},
		},
		listErr:     map[string]error{"a": errList},
		wantDeleted: map[string][]string{"b": {"fake://orphan-b"}},
		wantOrphans: 1, wantResult: gc.ResultPartial,
	}, {
		name: "an unreachable zone: what was read elsewhere is collected, the result is partial",
		planted: map[string][]provider.Instance{"a": {
			instance("orphan-a", "gone-a", time.Hour),
			inScope(instance("orphan-b", "gone-b", time.Hour), "zone-b"),
		}},
		unreachable: map[string][]string{"a": {"zone-b"}},
		wantDeleted: map[string][]string{"a": {"fake://orphan-a"}},
		wantOrphans: 1, wantResult: gc.ResultPartial,
	}, {
		name: "an instance listed in a scope reported unreachable is kept, even from a lax listing",
		planted: map[string][]provider.Instance{"a": {
			instance("orphan-a", "gone-a", time.Hour),
			inScope(instance("orphan-b", "gone-b", time.Hour), "zone-b"),
		}},
		lax: true, laxUnreachable: []string{"zone-b"},
		wantDeleted: map[string][]string{"a": {"fake://orphan-a"}},
		wantOrphans: 1, wantResult: gc.ResultPartial, wantKept: map[gc.Verdict]int{gc.KeepUnreachable: 1},
	}, {
		name: "another deployment's tag is kept, even from a lax listing",
		planted: map[string][]provider.Instance{"a": {func() provider.Instance {
			i := instance("theirs", "gone", time.Hour)
			i.Tag = "other-deployment"
			return i
		}()}},
		lax:        true,
		wantResult: gc.ResultComplete, wantKept: map[gc.Verdict]int{gc.KeepForeignTag: 1},
	}, {
		name: "an instance already terminating is not deleted again",
		planted: map[string][]provider.Instance{"a": {func() provider.Instance {
			i := instance("going", "gone", time.Hour)
			i.State = provider.StateTerminated
			return i
		}()}},
		wantResult: gc.ResultComplete, wantKept: map[gc.Verdict]int{gc.KeepTerminating: 1},
	}, {
		name:        "dry run: the orphan is reported and stays",
		planted:     map[string][]provider.Instance{"a": {instance("orphan", "gone", time.Hour)}},
		dryRun:      true,
		wantOrphans: 1, wantResult: gc.ResultComplete,
	}, {
		name:        "a failed delete makes the sweep partial and is retried next time",
		planted:     map[string][]provider.Instance{"a": {instance("orphan", "gone", time.Hour)}},
		deleteErr:   provider.Transient(errors.New("503")),
		wantOrphans: 1, wantResult: gc.ResultPartial,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(now)
			fakes := map[string]*fake.Provider{}
			provs := providers{}
			for name, insts := range tt.planted {
				f := fake.New(fake.WithClock(clk))
				for _, i := range insts {
					f.Plant(i)
				}
				for _, s := range tt.unreachable[name] {
					f.SetUnreachable(s, true)
				}
				if err := tt.listErr[name]; err != nil {
					f.InjectError(provider.OpList, err)
				}
				if tt.deleteErr != nil {
					f.InjectError(provider.OpDelete, tt.deleteErr)
				}
				fakes[name] = f
				provs[name] = f
				if name == "a" && tt.lax {
					provs[name] = lax{Provider: f, unreachable: tt.laxUnreachable}
				}
			}
			var reader client.Reader = ctrlfake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(tt.proxies...).Build()
			if tt.proxyListErr != nil {
				reader = interceptor.NewClient(reader.(client.WithWatch), interceptor.Funcs{
					List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
						return tt.proxyListErr
					},
				})
			}
			rec := &recorder{}
			opts := gc.DefaultOptions()
			opts.DryRun = tt.dryRun
			s, err := gc.New(gc.Config{Options: opts, Reader: reader, Providers: provs, Tag: tag, Clock: clk, Recorder: rec})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			before := map[string][]provider.Instance{}
			for name, f := range fakes {
				before[name] = f.Instances()
			}

			rep := s.Sweep(t.Context())

			gotDeleted := map[string][]string{}
			for name, f := range fakes {
				left := map[string]bool{}
				for _, i := range f.Instances() {
					left[i.ProviderID] = true
				}
				for _, i := range before[name] {
					if !left[i.ProviderID] {
						gotDeleted[name] = append(gotDeleted[name], i.ProviderID)
					}
				}
			}
			if diff := cmp.Diff(tt.wantDeleted, gotDeleted, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("instances deleted (-want +got):\n%s", diff)
			}
			if rep.Result != tt.wantResult {
				t.Errorf("result = %s, want %s (errors: %v)", rep.Result, tt.wantResult, rep.Errors)
			}
			if len(rep.Orphans) != tt.wantOrphans {
				t.Errorf("orphans reported = %+v, want %d", rep.Orphans, tt.wantOrphans)
			}
			if diff := cmp.Diff(tt.wantKept, rep.Kept, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("kept by verdict (-want +got):\n%s", diff)
			}
			wantCounted := map[string]int{}
			for name, ids := range tt.wantDeleted {
				wantCounted[name] = len(ids)
			}
			if diff := cmp.Diff(wantCounted, rec.deleted, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("deletions counted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]gc.Result{tt.wantResult}, rec.sweepResults()); diff != "" {
				t.Errorf("sweeps recorded (-want +got):\n%s", diff)
			}
			// Nothing but an orphan is ever the target of a Delete.
			for name, f := range fakes {
				for _, c := range f.CallsOf(provider.OpDelete) {
					if !containsID(tt.wantDeleted[name], c.ProviderID) && tt.deleteErr == nil {
						t.Errorf("provider %s: Delete(%s) called on a non-orphan", name, c.ProviderID)
					}
				}
				if tt.dryRun && len(f.CallsOf(provider.OpDelete)) > 0 {
					t.Errorf("dry run called Delete %d times", len(f.CallsOf(provider.OpDelete)))
				}
			}
		})
	}
}

func containsID(ids []string, id string) bool {
	for _, i := range ids {
		if i == id {
			return true
		}
	}
	return false
}

// TestSweepRetriesAFailedDelete: the orphan a failed Delete left is deleted
// by the next sweep, which is then complete.
func TestSweepRetriesAFailedDelete(t *testing.T) {
	clk := clocktesting.NewFakeClock(now)
	f := fake.New(fake.WithClock(clk))
	id := f.Plant(instance("orphan", "gone", time.Hour))
	f.InjectError(provider.OpDelete, provider.Transient(errors.New("503")))
	s, err := gc.New(gc.Config{Options: gc.DefaultOptions(), Reader: ctrlfake.NewClientBuilder().WithScheme(scheme(t)).Build(),
		Providers: providers{"a": f}, Tag: tag, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if rep := s.Sweep(t.Context()); rep.Result != gc.ResultPartial || rep.Orphans[0].Err == nil || rep.Orphans[0].Deleted {
		t.Fatalf("first sweep = %+v, want partial with the failed delete", rep)
	}
	if _, ok := f.Instance(id); !ok {
		t.Fatal("the orphan vanished although its Delete failed")
	}
	if rep := s.Sweep(t.Context()); rep.Result != gc.ResultComplete || !rep.Orphans[0].Deleted {
		t.Fatalf("second sweep = %+v, want the orphan deleted", rep)
	}
	if _, ok := f.Instance(id); ok {
		t.Error("the orphan is still there after the second sweep")
	}
}

// TestSweepDeletesAnOrphanOnce: a provider that lists an instance being
// deleted as stopped (Compute Engine's STOPPING) gets one Delete, counted
// once, not one per sweep until it is gone; an orphan still listed after
// the redelete window is deleted again.
func TestSweepDeletesAnOrphanOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(now)
	f := fake.New(fake.WithClock(clk), fake.WithGetsUntilGone(1000), fake.WithDeletingState(provider.StateStopped))
	f.Plant(instance("orphan", "gone", time.Hour))
	s, err := gc.New(gc.Config{Options: gc.DefaultOptions(), Reader: ctrlfake.NewClientBuilder().WithScheme(scheme(t)).Build(),
		Providers: providers{"a": f}, Tag: tag, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	deletes := func() int {
		n := 0
		for _, c := range f.Calls() {
			if c.Op == provider.OpDelete {
				n++
			}
		}
		return n
	}
	if rep := s.Sweep(t.Context()); len(rep.Orphans) != 1 || !rep.Orphans[0].Deleted {
		t.Fatalf("first sweep = %+v", rep)
	}
	clk.Step(2 * time.Second)
	rep := s.Sweep(t.Context())
	if len(rep.Orphans) != 0 || rep.Kept[gc.KeepTerminating] != 1 || deletes() != 1 {
		t.Errorf("second sweep while it is still being deleted = %+v, %d deletes; want it kept as terminating, 1 delete", rep, deletes())
	}
	clk.Step(11 * time.Minute)
	if rep := s.Sweep(t.Context()); len(rep.Orphans) != 1 || deletes() != 2 {
		t.Errorf("after the redelete window = %+v, %d deletes; want it deleted again", rep, deletes())
	}
}
