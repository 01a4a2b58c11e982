package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// maxWatcherBacklog is how many events a watcher may fall behind (beyond its
// initial events) before it is closed; the client then resumes from its last
// resourceVersion, which the history usually still holds.
const maxWatcherBacklog = 1024

type leaseKey struct{ namespace, name string }

func (k leaseKey) String() string { return k.namespace + "/" + k.name }

// cacheEntry is one live lease as the API shows it.
type cacheEntry struct {
	lease lease.Lease
	// tmpl holds what the Kubernetes API was given (nil: made over HTTP).
	tmpl *leasingv1alpha1.ProxyLease
	// obj is the published object; it is never mutated, readers copy it.
	obj *leasingv1alpha1.ProxyLease
}

type cacheEvent struct {
	rev  uint64
	typ  watch.EventType
	obj  *leasingv1alpha1.ProxyLease
	prev *leasingv1alpha1.ProxyLease // Modified only: the object before
}

type endedLease struct {
	id    string
	until time.Time
}

type endedRef struct {
	key   leaseKey
	until time.Time
}

// leaseCache is the API's view of the lease store: the live leases rendered
// as ProxyLeases, the recent events (so watches can resume from a
// resourceVersion) and the watchers. It is fed only by the store's events, in
// revision order, and the store revision is the resourceVersion.
type leaseCache struct {
	// rvBase is added to store revisions to make resourceVersions: the start
	// time in microseconds, so that the resourceVersions of a restarted
	// operator (whose store counts from 0 again) are above every one the
	// previous process handed out, and a client resuming from an old one gets
	// 410 Gone and lists again instead of silently missing changes.
	rvBase       uint64
	clock        clock.PassiveClock
	reportWindow time.Duration
	historySize  int

	mu    sync.Mutex
	ready bool
	early []lease.Event
	rev   uint64
	// floor: history holds every event with a revision above it.
	floor    uint64
	entries  map[string]*cacheEntry
	byName   map[leaseKey]*cacheEntry
	pending  map[leaseKey]*leasingv1alpha1.ProxyLease
	ended    map[leaseKey]endedLease
	endedQ   []endedRef
	history  []cacheEvent // ring of historySize
	histHead int
	histLen  int
	watchers map[*cacheWatcher]struct{}
}

// newLeaseCache subscribes to store and loads its current leases. The
// returned func unsubscribes and closes every watcher.
func newLeaseCache(svc *leasing.Service, clk clock.PassiveClock, historySize int) (*leaseCache, func()) {
	c := &leaseCache{
		rvBase:       uint64(clk.Now().UnixMicro()),
		clock:        clk,
		reportWindow: svc.CooldownWindow(),
		historySize:  historySize,
		entries:      map[string]*cacheEntry{},
		byName:       map[leaseKey]*cacheEntry{},
		pending:      map[leaseKey]*leasingv1alpha1.ProxyLease{},
		ended:        map[leaseKey]endedLease{},
		history:      make([]cacheEvent, historySize),
		watchers:     map[*cacheWatcher]struct{}{},
	}
	// Subscribe before the snapshot, drop what the snapshot already reflects:
	// every change is seen exactly once.
	cancel := svc.Watch(c.onEvent)
	leases, rev := svc.List("")
	c.mu.Lock()
	for i := range leases {
		c.insertLocked(&leases[i], nil)
	}
	c.rev, c.floor = rev, rev
	c.ready = true
	early := c.early
	c.early = nil
	for _, ev := range early {
		c.applyLocked(ev)
	}
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
func (c *leaseCache) onEvent(ev lease.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		c.early = append(c.early, ev)
		return
	}
	c.applyLocked(ev)
}

func (c *leaseCache) insertLocked(l *lease.Lease, tmpl *leasingv1alpha1.ProxyLease) *cacheEntry {
	e := &cacheEntry{lease: *l, tmpl: tmpl}
	e.obj = buildObject(&e.lease, tmpl, c.rvBase)
	c.entries[l.ID] = e
	c.byName[leaseKey{l.Namespace, l.Name}] = e
	return e
}

func (c *leaseCache) applyLocked(ev lease.Event) {
	if ev.Revision <= c.rev {
		return
	}
	c.rev = ev.Revision
	l := ev.Lease
	key := leaseKey{l.Namespace, l.Name}
	switch ev.Type {
	case lease.Added:
		tmpl := c.pending[key]
		delete(c.pending, key)
		e := c.insertLocked(&l, tmpl)
		c.publishLocked(cacheEvent{rev: ev.Revision, typ: watch.Added, obj: e.obj})
	case lease.Modified:
		e, ok := c.entries[l.ID]
		if !ok { // not seen before: cannot happen with ordered delivery, but stay whole
			e = c.insertLocked(&l, nil)
			c.publishLocked(cacheEvent{rev: ev.Revision, typ: watch.Added, obj: e.obj})
			return
		}
		prev := e.obj
		e.lease = l
		e.obj = buildObject(&e.lease, e.tmpl, c.rvBase)
		c.publishLocked(cacheEvent{rev: ev.Revision, typ: watch.Modified, obj: e.obj, prev: prev})
	case lease.Deleted:
		var tmpl *leasingv1alpha1.ProxyLease
		if e, ok := c.entries[l.ID]; ok {
			tmpl = e.tmpl
			delete(c.entries, l.ID)
			if c.byName[key] == e {
				delete(c.byName, key)
			}
		}
		now := c.clock.Now()
		until := now.Add(c.reportWindow)
		c.ended[key] = endedLease{id: l.ID, until: until}
		c.endedQ = append(c.endedQ, endedRef{key: key, until: until})
		c.pruneEndedLocked(now)
		c.publishLocked(cacheEvent{rev: ev.Revision, typ: watch.Deleted, obj: buildObject(&l, tmpl, c.rvBase)})
	}
}

func (c *leaseCache) pruneEndedLocked(now time.Time) {
	n := 0
	for n < len(c.endedQ) && !c.endedQ[n].until.After(now) {
		r := c.endedQ[n]
		if cur, ok := c.ended[r.key]; ok && cur.until.Equal(r.until) {
			delete(c.ended, r.key)
		}
		n++
	}
	if n > 0 {
		c.endedQ = slices.Delete(c.endedQ, 0, n)
	}
}

func (c *leaseCache) publishLocked(ev cacheEvent) {
	if c.histLen == c.historySize {
		c.floor = c.history[c.histHead].rev
		c.history[c.histHead] = cacheEvent{}
		c.histHead = (c.histHead + 1) % c.historySize
		c.histLen--
	}
	c.history[(c.histHead+c.histLen)%c.historySize] = ev
	c.histLen++
	for w := range c.watchers {
		if ev.rev <= w.startRev {
			continue
		}
		if out, ok := w.translate(ev); ok && !w.push(out) {
			c.terminateLocked(w)
		}
	}
}

// reserve records the API's metadata for a lease about to be acquired under
// key, so the store's Added event renders it complete. It fails when a live
// or reserved lease already has the name.
func (c *leaseCache) reserve(key leaseKey, tmpl *leasingv1alpha1.ProxyLease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[key]; ok {
		return false
	}
	if _, ok := c.byName[key]; ok {
		return false
	}
	c.pending[key] = tmpl
	return true
}

// unreserve drops a reservation that no lease took.
func (c *leaseCache) unreserve(key leaseKey, tmpl *leasingv1alpha1.ProxyLease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[key] == tmpl {
		delete(c.pending, key)
	}
}

// objectByID returns a copy of the published object of a live lease.
func (c *leaseCache) objectByID(id string) (*leasingv1alpha1.ProxyLease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok {
		return nil, false
	}
	return e.obj.DeepCopy(), true
}

// get returns the lease ID, a copy of the object and the template of a live,
// unexpired lease.
func (c *leaseCache) get(key leaseKey) (string, *leasingv1alpha1.ProxyLease, *leasingv1alpha1.ProxyLease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byName[key]
	if !ok || !e.lease.ExpiresAt.After(c.clock.Now()) {
		return "", nil, nil, false
	}
	return e.lease.ID, e.obj.DeepCopy(), e.tmpl, true
}

// setTemplate replaces a live lease's template (before a renewal, whose
// event then renders it) and returns the previous one.
func (c *leaseCache) setTemplate(id string, tmpl *leasingv1alpha1.ProxyLease) (*leasingv1alpha1.ProxyLease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok {
		return nil, false
	}
	old := e.tmpl
	e.tmpl = tmpl
	return old, true
}

// reportableID finds the lease a report by name is about: the live lease of
// that name, else the one of that name that ended within the report window.
func (c *leaseCache) reportableID(key leaseKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byName[key]; ok {
		return e.lease.ID, true
	}
	now := c.clock.Now()
	c.pruneEndedLocked(now)
	if x, ok := c.ended[key]; ok && x.until.After(now) {
		return x.id, true
	}
	return "", false
}

// list returns copies of the live leases of namespace ("" = all) that pred
// accepts, sorted by namespace and name, and the resourceVersion they
// reflect.
func (c *leaseCache) list(namespace string, pred func(*leasingv1alpha1.ProxyLease) bool) ([]leasingv1alpha1.ProxyLease, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	var out []leasingv1alpha1.ProxyLease
	for _, e := range c.sortedLocked(namespace) {
		if e.lease.ExpiresAt.After(now) && pred(e.obj) {
			out = append(out, *e.obj.DeepCopy())
		}
	}
	return out, c.rvBase + c.rev
}

func (c *leaseCache) sortedLocked(namespace string) []*cacheEntry {
	out := make([]*cacheEntry, 0, len(c.entries))
	for _, e := range c.entries {
		if namespace == "" || e.lease.Namespace == namespace {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *cacheEntry) int {
		if x := strings.Compare(a.lease.Namespace, b.lease.Namespace); x != 0 {
			return x
		}
		return strings.Compare(a.lease.Name, b.lease.Name)
	})
	return out
}

// resourceVersion is the resourceVersion of the last event applied.
func (c *leaseCache) resourceVersion() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rvBase + c.rev
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

	c.mu.Lock()
	defer c.mu.Unlock()
	var from uint64
	if !legacy {
		switch {
		case external > c.rvBase+c.rev:
			return nil, apierrors.NewResourceExpired(fmt.Sprintf(
				"resourceVersion %d is newer than the server's %d; list again", external, c.rvBase+c.rev))
		case external < c.rvBase && !sendInitial:
			// Initial events (NotOlderThan) are served from the current state,
			// which is newer than any old resourceVersion; a resume is not.
			return nil, apierrors.NewResourceExpired(fmt.Sprintf(
				"resourceVersion %d is from before the operator restarted (leases live in its memory); list again", external))
		case external >= c.rvBase:
			from = external - c.rvBase
		}
	}
	switch {
	case sendInitial:
		now := c.clock.Now()
		for _, e := range c.sortedLocked(namespace) {
			if e.lease.ExpiresAt.After(now) && w.pred(e.obj) {
				w.queue = append(w.queue, watch.Event{Type: watch.Added, Object: e.obj.DeepCopy()})
			}
		}
		if opts.AllowWatchBookmarks {
			w.queue = append(w.queue, watch.Event{Type: watch.Bookmark, Object: &leasingv1alpha1.ProxyLease{
				ObjectMeta: metav1.ObjectMeta{
					ResourceVersion: strconv.FormatUint(c.rvBase+c.rev, 10),
					Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
				},
			}})
		}
	case legacy:
		// From now on.
	default:
		if from < c.floor {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf(
				"too old resource version: %d (the oldest kept is %d)", external, c.rvBase+c.floor))
		}
		for i := 0; i < c.histLen; i++ {
			ev := c.history[(c.histHead+i)%c.historySize]
			if ev.rev <= from {
				continue
			}
			if out, ok := w.translate(ev); ok {
				w.queue = append(w.queue, out)
			}
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
// moves it in or out of the selection.
func (w *cacheWatcher) translate(ev cacheEvent) (watch.Event, bool) {
	in := func(o *leasingv1alpha1.ProxyLease) bool {
		return o != nil && (w.namespace == "" || o.Namespace == w.namespace) && w.pred(o)
	}
	cur := in(ev.obj)
	typ := ev.typ
	if ev.typ == watch.Modified {
		prev := in(ev.prev)
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
	return watch.Event{Type: typ, Object: ev.obj.DeepCopy()}, true
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
