package proxylease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// seen is an event as the tests compare it.
type seen struct {
	Type watch.EventType
	Name string
}

func (f *fixture) watch(ctx context.Context, opts *metainternalversion.ListOptions) watch.Interface {
	f.t.Helper()
	w, err := f.rest.Watch(ctx, opts)
	if err != nil {
		f.t.Fatalf("watch: %v", err)
	}
	f.t.Cleanup(w.Stop)
	return w
}

// next reads n events, failing after a (real-time) second without one.
func next(t *testing.T, w watch.Interface, n int) []seen {
	t.Helper()
	var out []seen
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %v", out)
			}
			name := ev.Object.(*leasingv1alpha1.ProxyLease).Name
			out = append(out, seen{ev.Type, name})
		case <-time.After(5 * time.Second):
			t.Fatalf("got %v, waiting for %d events", out, n)
		}
	}
	return out
}

// quiet asserts that no event arrives for a short while.
func quiet(t *testing.T, w watch.Interface) {
	t.Helper()
	select {
	case ev := <-w.ResultChan():
		t.Errorf("unexpected event %s %v", ev.Type, ev.Object)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestWatchSeesCreateRenewReportDeleteAndExpiry(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	f.mustCreate(ctx, newLease("before"))
	w := f.watch(ctx, &metainternalversion.ListOptions{Watch: true})
	if diff := cmp.Diff([]seen{{watch.Added, "before"}}, next(t, w, 1)); diff != "" {
		t.Errorf("initial events (-want +got):\n%s", diff)
	}

	f.mustCreate(ctx, newLease("l", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.TTLSeconds = ptr.To[int32](10) }))
	if _, err := f.reportOn(ctx, "l", leasingv1alpha1.ResultOK, ""); err != nil {
		t.Fatal(err)
	}
	if err := deleteLease(f, ctx, "before"); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(10 * time.Second)
	f.store.Sweep()
	want := []seen{{watch.Added, "l"}, {watch.Modified, "l"}, {watch.Deleted, "before"}, {watch.Deleted, "l"}}
	if diff := cmp.Diff(want, next(t, w, 4)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	quiet(t, w)
}

// The store's own timer (Store.Start) delivers an expiry at its instant,
// with no API call to observe it: watchers see DELETED then.
func TestStoreTimerSendsDeletedAtExpiry(t *testing.T) {
	f := newFixture(t, lease.Options{SweepInterval: time.Hour}, proxy("ns", "px", nil))
	ctx, cancel := context.WithCancel(ctxFor("ns", "u"))
	defer cancel()
	go func() { _ = f.store.Start(ctx) }()
	w := f.watch(ctx, &metainternalversion.ListOptions{Watch: true, ResourceVersion: fmt.Sprint(f.cache.resourceVersion())})
	f.mustCreate(ctx, newLease("l", func(pl *leasingv1alpha1.ProxyLease) { pl.Spec.TTLSeconds = ptr.To[int32](10) }))
	next(t, w, 1)
	f.clock.Step(9 * time.Second)
	quiet(t, w)
	f.clock.Step(time.Second)
	if diff := cmp.Diff([]seen{{watch.Deleted, "l"}}, next(t, w, 1)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWatchSelectorsAndNamespaces(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil), proxy("other", "px", nil))
	ctx := ctxFor("ns", "u")
	w := f.watch(ctx, &metainternalversion.ListOptions{Watch: true, LabelSelector: labels.SelectorFromSet(labels.Set{"team": "x"})})
	all := f.watch(ctxFor("", "u"), &metainternalversion.ListOptions{Watch: true})

	f.mustCreate(ctxFor("other", "u"), newLease("elsewhere", func(pl *leasingv1alpha1.ProxyLease) { pl.Labels = map[string]string{"team": "x"} }))
	f.mustCreate(ctx, newLease("l"))
	setLabels := func(l map[string]string) {
		t.Helper()
		_, _, err := f.rest.Update(ctx, "l", rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			pl := old.(*leasingv1alpha1.ProxyLease).DeepCopy()
			pl.Labels = l
			return pl, nil
		}), nil, nil, false, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	setLabels(map[string]string{"team": "x"}) // moves into the selection
	setLabels(map[string]string{"team": "y"}) // moves out of it
	if diff := cmp.Diff([]seen{{watch.Added, "l"}, {watch.Deleted, "l"}}, next(t, w, 2)); diff != "" {
		t.Errorf("selector watch (-want +got):\n%s", diff)
	}
	quiet(t, w)
	want := []seen{{watch.Added, "elsewhere"}, {watch.Added, "l"}, {watch.Modified, "l"}, {watch.Modified, "l"}}
	if diff := cmp.Diff(want, next(t, all, 4)); diff != "" {
		t.Errorf("all-namespaces watch (-want +got):\n%s", diff)
	}
}

func TestWatchResumesFromResourceVersion(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	f.mustCreate(ctx, newLease("a"))
	f.mustCreate(ctx, newLease("b"))
	list, err := f.rest.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := list.(*leasingv1alpha1.ProxyLeaseList).ResourceVersion
	f.mustCreate(ctx, newLease("c"))
	if err := deleteLease(f, ctx, "a"); err != nil {
		t.Fatal(err)
	}
	w := f.watch(ctx, &metainternalversion.ListOptions{Watch: true, ResourceVersion: rv, SendInitialEvents: ptr.To(false)})
	if diff := cmp.Diff([]seen{{watch.Added, "c"}, {watch.Deleted, "a"}}, next(t, w, 2)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	quiet(t, w)
}

func TestWatchRefusesResourceVersionsItCannotServe(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 100}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	for i := 0; i < 70; i++ { // more events than the fixture's history of 64
		f.mustCreate(ctx, newLease(fmt.Sprintf("l%d", i)))
	}
	cur := f.cache.resourceVersion()
	for _, rv := range []uint64{1, cur + 1} {
		_, err := f.rest.Watch(ctx, &metainternalversion.ListOptions{Watch: true, ResourceVersion: fmt.Sprint(rv)})
		if !apierrors.IsResourceExpired(err) {
			t.Errorf("watch from %d (current %d): %v, want 410 Gone", rv, cur, err)
		}
	}
	// Negative control: a recent resourceVersion is served.
	if _, err := f.rest.Watch(ctx, &metainternalversion.ListOptions{Watch: true, ResourceVersion: fmt.Sprint(cur - 10)}); err != nil {
		t.Errorf("watch from a recent resourceVersion: %v", err)
	}
	if _, err := f.rest.Watch(ctx, &metainternalversion.ListOptions{Watch: true, ResourceVersion: "x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("watch from resourceVersion x: %v, want BadRequest", err)
	}
}

func TestWatchListEndsInitialEventsWithABookmark(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	f.mustCreate(ctx, newLease("a"))
	f.mustCreate(ctx, newLease("b"))
	w := f.watch(ctx, &metainternalversion.ListOptions{
		Watch: true, SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if diff := cmp.Diff([]seen{{watch.Added, "a"}, {watch.Added, "b"}}, next(t, w, 2)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	select {
	case ev := <-w.ResultChan():
		pl := ev.Object.(*leasingv1alpha1.ProxyLease)
		if ev.Type != watch.Bookmark || pl.Annotations[metav1.InitialEventsAnnotationKey] != "true" ||
			pl.ResourceVersion != fmt.Sprint(f.cache.resourceVersion()) {
			t.Errorf("after the initial events: %s %+v, want the initial-events-end bookmark", ev.Type, pl.ObjectMeta)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no bookmark")
	}
	f.mustCreate(ctx, newLease("c"))
	if diff := cmp.Diff([]seen{{watch.Added, "c"}}, next(t, w, 1)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSlowWatcherIsClosedNotBlocking(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	f.mustCreate(ctx, newLease("l"))
	w := f.watch(ctx, &metainternalversion.ListOptions{Watch: true, ResourceVersion: fmt.Sprint(f.cache.resourceVersion())})
	for i := 0; i < maxWatcherBacklog+10; i++ { // never read: the store must not block
		if _, err := f.reportOn(ctx, "l", leasingv1alpha1.ResultOK, ""); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(5 * time.Second)
	for n := 0; ; n++ {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				if n > maxWatcherBacklog+1 {
					t.Errorf("closed after %d events, want at most the backlog", n)
				}
				if f.cache.watcherCount() != 0 {
					t.Errorf("%d watchers still registered", f.cache.watcherCount())
				}
				return
			}
		case <-deadline:
			t.Fatal("the slow watcher was never closed")
		}
	}
}

func TestCacheSeesLeasesThatExistedBeforeIt(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	if _, err := f.store.Acquire(lease.AcquireRequest{Namespace: "ns", Name: "old", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	late, closeLate := newLeaseCache(f.rest.svc, f.clock, 8)
	defer closeLate()
	items, rev, err := late.list(context.Background(), "ns", predicateFor(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].Name != "old" || rev != f.cache.resourceVersion() {
		t.Errorf("late cache: %v at %d, want [old] at %d", leaseNames(items), rev, f.cache.resourceVersion())
	}
}

func TestResourceVersionsOfARestartedOperatorAreNotResumed(t *testing.T) {
	before := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	old := before.mustCreate(ctx, newLease("a"))

	// The operator restarts a second later: a new store counting from 0 again.
	after := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	after.clock.SetTime(epoch.Add(time.Second))
	restarted, closeRestarted := newLeaseCache(after.rest.svc, after.clock, 64)
	defer closeRestarted()
	after.rest.cache = restarted
	for i := 0; i < 5; i++ {
		after.mustCreate(ctx, newLease(fmt.Sprintf("n%d", i)))
	}
	if _, err := after.rest.Watch(ctx, &metainternalversion.ListOptions{Watch: true, ResourceVersion: old.ResourceVersion}); !apierrors.IsResourceExpired(err) {
		t.Errorf("resuming the old process's resourceVersion %s (new one at %d): %v, want 410 Gone",
			old.ResourceVersion, restarted.resourceVersion(), err)
	}
	// Negative control: the new process's own resourceVersions resume.
	w, err := after.rest.Watch(ctx, &metainternalversion.ListOptions{Watch: true, ResourceVersion: fmt.Sprint(restarted.resourceVersion() - 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if diff := cmp.Diff([]seen{{watch.Added, "n3"}, {watch.Added, "n4"}}, next(t, w, 2)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWatchListFromAnOldResourceVersionGetsTheCurrentState(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", nil))
	ctx := ctxFor("ns", "u")
	f.mustCreate(ctx, newLease("a"))
	w := f.watch(ctx, &metainternalversion.ListOptions{
		Watch: true, ResourceVersion: "1", SendInitialEvents: ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if diff := cmp.Diff([]seen{{watch.Added, "a"}}, next(t, w, 1)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
