package proxylease

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// maxWatcherBacklog is how many events a watcher may fall behind (beyond its
// initial events) before it is closed; the client then resumes from its last
// resourceVersion, which the history usually still holds.
const maxWatcherBacklog = 1024

// cacheEvent is one store event as watchers see it. Its objects are rendered
// on first use (under the cache lock), so events nobody watches cost no
// rendering.
type cacheEvent struct {
	rev   uint64
	typ   watch.EventType
	lease leasing.Lease
	// prev is the lease before a change of its metadata (labels may move it
	// in or out of a watch's selection); nil otherwise.
	prev         *leasing.Lease
	obj, prevObj *leasingv1alpha1.ProxyLease
}

// leaseCache is the watch fan-out of the ProxyLease API: the recent store
// events (so watches can resume from a resourceVersion) and the watchers. It
// holds no lease state of its own: reads go to the lease service, and the
// store revision is the resourceVersion.
type leaseCache struct {
	// rvBase is added to store revisions to make resourceVersions: the start
	// time in microseconds, so that the resourceVersions of a restarted
	// operator (whose store counts from 0 again) are above every one the
	// previous process handed out, and a client resuming from an old one gets
	// 410 Gone and lists again instead of silently missing changes. With a
	// lease checkpoint it is the checkpoint's and the store resumes its
	// revision, so resourceVersions are the same across the restart.
	rvBase      atomic.Uint64
	svc         *leasing.Service
	historySize int

	mu    sync.Mutex
	ready bool
	early []leasing.Event
	// advanced is broadcast whenever rev grows.
	advanced *sync.Cond
	rev      uint64
	// floor: history holds every event with a revision above it.
	floor uint64
	// history is a ring of historySize events, kept by value: one event per
	// lease change, allocated once (pointers into it live under mu only).
	history  []cacheEvent
	histHead int
	histLen  int
	watchers map[*cacheWatcher]struct{}
}

// newLeaseCache subscribes to the service's lease events. The returned func
// unsubscribes and closes every watcher.
func newLeaseCache(svc *leasing.Service, clk clock.PassiveClock, historySize int) (*leaseCache, func()) {
	c := &leaseCache{
		svc:         svc,
		historySize: historySize,
		history:     make([]cacheEvent, historySize),
		watchers:    map[*cacheWatcher]struct{}{},
	}
	c.rvBase.Store(uint64(clk.Now().UnixMicro()))
	c.advanced = sync.NewCond(&c.mu)
	// Subscribe before reading the revision, hold events back until it is
	// known, then drop those at or below it: every change is seen once.
	cancel := svc.Watch(c.onEvent)
	rev := svc.FeedRevision()
	c.mu.Lock()
	c.rev, c.floor = rev, rev
	c.ready = true
	for _, ev := range c.early {
		c.applyLocked(ev)
	}
	c.early = nil
	c.mu.Unlock()
	return c, func() {
		cancel()
		c.mu.Lock()
		for w := range c.watchers {
			c.terminateLocked(w)
		}
		c.mu.Unlock()
	}
}

// onEvent is the store subscription: it must not block and must not call the
// store.
func (c *leaseCache) onEvent(ev leasing.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		c.early = append(c.early, ev)
		return
	}
	c.applyLocked(ev)
}

func (c *leaseCache) applyLocked(ev leasing.Event) {
	if ev.Revision <= c.rev {
		return
	}
	c.rev = ev.Revision
	var typ watch.EventType
	switch ev.Type {
	case leasing.Added:
		typ = watch.Added
	case leasing.Modified:
		typ = watch.Modified
	case leasing.Deleted:
		typ = watch.Deleted
	}
	c.publishLocked(cacheEvent{rev: ev.Revision, typ: typ, lease: ev.Lease, prev: ev.Previous})
	c.advanced.Broadcast()
}

// objects renders ev's objects once.
func (c *leaseCache) objectsLocked(ev *cacheEvent) (obj, prev *leasingv1alpha1.ProxyLease) {
	if ev.obj == nil {
		ev.obj = buildObject(c.svc, &ev.lease, c.rvBase.Load())
		if ev.prev != nil {
			ev.prevObj = buildObject(c.svc, ev.prev, c.rvBase.Load())
		}
	}
	return ev.obj, ev.prevObj
}

func (c *leaseCache) publishLocked(e cacheEvent) {
	if c.histLen == c.historySize {
		c.floor = c.history[c.histHead].rev
		c.histHead = (c.histHead + 1) % c.historySize
		c.histLen--
	}
	ev := &c.history[(c.histHead+c.histLen)%c.historySize]
	*ev = e
	c.histLen++
	for w := range c.watchers {
		if ev.rev <= w.startRev {
			continue
		}
		if out, ok := w.translate(c, ev); ok && !w.push(out) {
			c.terminateLocked(w)
		}
	}
}

// awaitLocked waits until the events up to rev, which the store has made,
// have reached the cache (they are delivered right after the store call that
// made them returns), so that a resourceVersion handed out is one a watch can
// start from.
func (c *leaseCache) awaitLocked(rev uint64) {
	for c.rev < rev {
		c.advanced.Wait()
	}
}

// get renders the live lease namespace/name. Errors: the leasing
// Service's (ReasonNotLeader).
func (c *leaseCache) get(ctx context.Context, namespace, name string) (leasing.Lease, *leasingv1alpha1.ProxyLease, bool, error) {
	l, ok, err := c.svc.GetByName(ctx, namespace, name)
	if err != nil || !ok {
		return leasing.Lease{}, nil, false, err
	}
	return l, buildObject(c.svc, &l, c.rvBase.Load()), true, nil
}

// render is the object of a lease the service just returned.
func (c *leaseCache) render(l *leasing.Lease) *leasingv1alpha1.ProxyLease {
	return buildObject(c.svc, l, c.rvBase.Load())
}

// list renders the live leases of namespace ("" = all) that pred accepts,
// sorted by namespace and name, and the resourceVersion they reflect.
// Errors: the leasing Service's (ReasonNotLeader).
func (c *leaseCache) list(ctx context.Context, namespace string, pred func(*leasingv1alpha1.ProxyLease) bool) ([]leasingv1alpha1.ProxyLease, uint64, error) {
	leases, rev, err := c.svc.List(ctx, namespace)
	if err != nil {
		return nil, 0, err
	}
	var out []leasingv1alpha1.ProxyLease
	for i := range leases {
		if obj := buildObject(c.svc, &leases[i], c.rvBase.Load()); pred(obj) {
			out = append(out, *obj)
		}
	}
	c.mu.Lock()
	c.awaitLocked(rev)
	c.mu.Unlock()
	return out, c.rvBase.Load() + rev, nil
}

// resourceVersion is the resourceVersion of the last event applied.
func (c *leaseCache) resourceVersion() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rvBase.Load() + c.rev
}

func predicateFor(opts *metainternalversion.ListOptions) func(*leasingv1alpha1.ProxyLease) bool {
	lbl, fld := labels.Everything(), fields.Everything()
	if opts != nil && opts.LabelSelector != nil {
		lbl = opts.LabelSelector
	}
	if opts != nil && opts.FieldSelector != nil {
		fld = opts.FieldSelector
	}
	if lbl.Empty() && fld.Empty() {
		return func(*leasingv1alpha1.ProxyLease) bool { return true }
	}
	return func(o *leasingv1alpha1.ProxyLease) bool {
		return lbl.Matches(labels.Set(o.Labels)) && fld.Matches(leasingv1alpha1.SelectableFields(o))
	}
}

func parseResourceVersion(rv string) (uint64, error) {
	if rv == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: %v", rv, err))
	}
	return n, nil
}

// watch starts a watch of namespace ("" = all) with the semantics of
// kube-apiserver: initial events (sendInitialEvents, or a legacy watch from
// resourceVersion "" or "0") followed, with bookmarks allowed, by the
// initial-events-end bookmark; or a resume from a resourceVersion the history
// still covers (410 Gone otherwise, including after a restart of the
// operator, which restarts revisions).
func (c *leaseCache) watch(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	if opts == nil {
		opts = &metainternalversion.ListOptions{}
	}
	legacy := opts.ResourceVersion == "" || opts.ResourceVersion == "0"
	var external uint64
	if !legacy {
		var err error
		if external, err = parseResourceVersion(opts.ResourceVersion); err != nil {
			return nil, err
		}
	}
	sendInitial := legacy
	if opts.SendInitialEvents != nil {
		sendInitial = *opts.SendInitialEvents
	}
	w := &cacheWatcher{
		cache:     c,
		namespace: namespace,
		pred:      predicateFor(opts),
		signal:    make(chan struct{}, 1),
		result:    make(chan watch.Event),
		done:      make(chan struct{}),
	}
	// The initial state is read from the service, outside the cache lock (the
	// store delivers events to the cache while holding its own).
	var initial []leasing.Lease
	var initialRev uint64
	if sendInitial {
		var err error
		if initial, initialRev, err = c.svc.List(ctx, namespace); err != nil {
			return nil, err
		}
	}
	newest, err := c.svc.Revision(ctx)
	if err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	var from uint64
	switch {
	case sendInitial:
		c.awaitLocked(initialRev)
		from = initialRev
		for i := range initial {
			if obj := buildObject(c.svc, &initial[i], c.rvBase.Load()); w.pred(obj) {
				w.queue = append(w.queue, watch.Event{Type: watch.Added, Object: obj})
			}
		}
		if opts.AllowWatchBookmarks {
			w.queue = append(w.queue, watch.Event{Type: watch.Bookmark, Object: &leasingv1alpha1.ProxyLease{
				ObjectMeta: metav1.ObjectMeta{
					ResourceVersion: strconv.FormatUint(c.rvBase.Load()+from, 10),
					Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
				},
			}})
		}
	case legacy:
		from = c.rev // from now on
	case external > c.rvBase.Load()+newest:
		return nil, apierrors.NewResourceExpired(fmt.Sprintf(
			"resourceVersion %d is newer than the server's %d; list again", external, c.rvBase.Load()+newest))
	case external < c.rvBase.Load():
		return nil, apierrors.NewResourceExpired(fmt.Sprintf(
			"resourceVersion %d is from before the operator restarted (leases live in its memory); list again", external))
	default:
		from = external - c.rvBase.Load()
		c.awaitLocked(from)
		if from < c.floor {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf(
				"too old resource version: %d (the oldest kept is %d)", external, c.rvBase.Load()+c.floor))
		}
	}
	for i := 0; i < c.histLen; i++ {
		ev := &c.history[(c.histHead+i)%c.historySize]
		if ev.rev <= from {
			continue
		}
		if out, ok := w.translate(c, ev); ok {
			w.queue = append(w.queue, out)
		}
	}
	w.startRev = c.rev
	w.limit = len(w.queue) + maxWatcherBacklog
	c.watchers[w] = struct{}{}
	go w.run(ctx)
	return w, nil
}

func (c *leaseCache) terminateLocked(w *cacheWatcher) {
	delete(c.watchers, w)
	w.stopOnce.Do(func() { close(w.done) })
}

func (c *leaseCache) removeWatcher(w *cacheWatcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.watchers, w)
}

// watcherCount is for tests.
func (c *leaseCache) watcherCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watchers)
}

// cacheWatcher is one watch. Events are queued (never blocking the store's
// delivery) and a goroutine hands them to the client.
type cacheWatcher struct {
	cache     *leaseCache
	namespace string
	pred      func(*leasingv1alpha1.ProxyLease) bool
	startRev  uint64

	mu    sync.Mutex
	queue []watch.Event
	// limit is the queue length at which the watcher is closed: its initial
	// events plus maxWatcherBacklog.
	limit  int
	signal chan struct{}

	result   chan watch.Event
	done     chan struct{}
	stopOnce sync.Once
}

var _ watch.Interface = (*cacheWatcher)(nil)

// translate turns a cache event into what this watcher sees: nothing when the
// object is outside its namespace or selectors, ADDED or DELETED when a change
// moves it in or out of the selection. Called with c.mu held.
func (w *cacheWatcher) translate(c *leaseCache, ev *cacheEvent) (watch.Event, bool) {
	if w.namespace != "" && ev.lease.Namespace != w.namespace {
		return watch.Event{}, false
	}
	obj, prevObj := c.objectsLocked(ev)
	cur := w.pred(obj)
	typ := ev.typ
	if ev.typ == watch.Modified && prevObj != nil {
		prev := w.pred(prevObj)
		switch {
		case cur && !prev:
			typ = watch.Added
		case !cur && prev:
			typ, cur = watch.Deleted, true
		}
	}
	if !cur {
		return watch.Event{}, false
	}
	return watch.Event{Type: typ, Object: obj.DeepCopy()}, true
}

// push queues an event; false when the watcher fell too far behind.
func (w *cacheWatcher) push(ev watch.Event) bool {
	w.mu.Lock()
	if len(w.queue) >= w.limit {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
	return true
}

func (w *cacheWatcher) run(ctx context.Context) {
	defer close(w.result)
	defer w.Stop()
	for {
		// One at a time, so the queue length is the whole backlog.
		w.mu.Lock()
		var ev watch.Event
		have := len(w.queue) > 0
		if have {
			ev = w.queue[0]
			w.queue[0] = watch.Event{}
			w.queue = w.queue[1:]
		}
		w.mu.Unlock()
		if have {
			select {
			case w.result <- ev:
			case <-w.done:
				return
			case <-ctx.Done():
				return
			}
			continue
		}
		select {
		case <-w.signal:
		case <-w.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Stop ends the watch; ResultChan is closed soon after.
func (w *cacheWatcher) Stop() {
	w.stopOnce.Do(func() { close(w.done) })
	w.cache.removeWatcher(w)
}

// ResultChan delivers the events.
func (w *cacheWatcher) ResultChan() <-chan watch.Event { return w.result }

// restored follows a lease checkpoint loaded into the store (before this
// replica serves): resourceVersions continue from the checkpoint's base and
// revision, and the history starts there, so a watch from a resourceVersion
// of the previous process resumes.
func (c *leaseCache) restored(rvBase uint64) {
	rev := c.svc.FeedRevision()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rvBase.Store(rvBase)
	c.rev, c.floor = rev, rev
	clear(c.history)
	c.histHead, c.histLen = 0, 0
	c.advanced.Broadcast()
}
