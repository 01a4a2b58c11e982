package flowcontrol

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// fakeReq is the payload of the tests: selector "" matches every proxy,
// otherwise only proxies of that kind.
type fakeReq struct {
	id       int
	selector string
	// ttl, when set with a clock, makes the lease expire by itself.
	ttl time.Duration
}

// fakeGrant is one lease of the fake.
type fakeGrant struct {
	lease int
	proxy int
	flow  string
	req   int
}

// fakeCalls counts calls per method.
type fakeCalls struct {
	TryDispatch, Held, Release, NextChange int
}

// fakeDispatcher is an in-memory pool of proxies with exclusive leases, like
// the lease store with maxLeasesPerProxy=1. It records calls and grants, can
// inject the next TryDispatch error, and checks that every lease ends
// exactly once (released once, or expired and never released).
type fakeDispatcher struct {
	clock clock.PassiveClock // nil: leases never expire

	mu            sync.Mutex
	kinds         []string // proxy kinds
	busy          []int    // lease holding each proxy, 0 if free
	live          map[int]fakeGrant
	expires       map[int]time.Time
	held          map[string]int
	releases      map[int]int
	expired       map[int]bool
	granted       []fakeGrant
	nextID        int
	exhaustedHint bool
	nextErr       error
	calls         fakeCalls
	violations    []string
	// onCapacity emulates the lease store's capacity hook: it runs after the
	// fake's lock is released, on the goroutine of the call that freed
	// capacity (a release, or an expiry observed by any call).
	onCapacity func()
	// signalEveryTry makes every TryDispatch fire onCapacity (spurious).
	signalEveryTry bool
	// hideExpiries makes NextChange report nothing.
	hideExpiries bool
	freed        bool
	// onHeldChange is told, after the fake's lock is released, of every
	// flow whose held count changed (as the store's lease events would).
	onHeldChange func(flow string)
	changed      []string
	// onTry runs under the fake's lock before a TryDispatch decides.
	onTry func(flow string, r fakeReq)
}

var (
	_ Dispatcher[fakeReq, fakeGrant] = (*fakeDispatcher)(nil)
	_ Classifier[fakeReq]            = (*fakeDispatcher)(nil)
)

// Class: requests compete for the same proxies exactly when their
// selectors are equal.
func (f *fakeDispatcher) Class(r fakeReq) string { return r.selector }

// classless hides the fake's Classifier: the core then keeps one FIFO per
// flow, as before classes existed (a negative control of head-of-line
// blocking within a flow).
type classless struct{ Dispatcher[fakeReq, fakeGrant] }

func newFake(kinds ...string) *fakeDispatcher {
	f := &fakeDispatcher{
		live:     map[int]fakeGrant{},
		expires:  map[int]time.Time{},
		held:     map[string]int{},
		releases: map[int]int{},
		expired:  map[int]bool{},
	}
	for _, k := range kinds {
		f.addProxyLocked(k)
	}
	return f
}

func newUniformFake(n int) *fakeDispatcher {
	kinds := make([]string, n)
	for i := range kinds {
		kinds[i] = "any"
	}
	return newFake(kinds...)
}

func (f *fakeDispatcher) addProxyLocked(kind string) {
	f.kinds = append(f.kinds, kind)
	f.busy = append(f.busy, 0)
}

// addProxy adds a proxy; the caller fires the capacity event.
func (f *fakeDispatcher) addProxy(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addProxyLocked(kind)
}

func (f *fakeDispatcher) injectError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextErr = err
}

func (f *fakeDispatcher) expireLocked() {
	if f.clock == nil {
		return
	}
	now := f.clock.Now()
	for id, at := range f.expires {
		if now.Before(at) {
			continue
		}
		g := f.live[id]
		delete(f.expires, id)
		delete(f.live, id)
		f.busy[g.proxy] = 0
		f.held[g.flow]--
		f.changed = append(f.changed, g.flow)
		f.expired[id] = true
		f.freed = true
	}
}

// unlock releases the fake's lock, then fires the capacity hook if the call
// freed capacity.
func (f *fakeDispatcher) unlock() {
	hook := f.onCapacity
	fire := f.freed && hook != nil
	f.freed = false
	var changed []string
	if f.onHeldChange != nil && len(f.changed) > 0 {
		changed = f.changed
		f.changed = nil
	}
	f.changed = f.changed[:0]
	onHeld := f.onHeldChange
	f.mu.Unlock()
	for _, flow := range changed {
		onHeld(flow)
	}
	if fire {
		hook()
	}
}

func (f *fakeDispatcher) matches(p int, r fakeReq) bool {
	return r.selector == "" || f.kinds[p] == r.selector
}

func (f *fakeDispatcher) TryDispatch(flow string, r fakeReq) (fakeGrant, Verdict, error) {
	f.mu.Lock()
	defer f.unlock()
	f.calls.TryDispatch++
	f.freed = f.freed || f.signalEveryTry
	if f.onTry != nil {
		f.onTry(flow, r)
	}
	if err := f.nextErr; err != nil {
		f.nextErr = nil
		return fakeGrant{}, NoMatch, err
	}
	f.expireLocked()
	anyFree := false
	for p := range f.busy {
		if f.busy[p] != 0 {
			continue
		}
		anyFree = true
		if !f.matches(p, r) {
			continue
		}
		f.nextID++
		g := fakeGrant{lease: f.nextID, proxy: p, flow: flow, req: r.id}
		f.busy[p] = g.lease
		f.live[g.lease] = g
		f.held[flow]++
		f.changed = append(f.changed, flow)
		f.granted = append(f.granted, g)
		if r.ttl > 0 && f.clock != nil {
			f.expires[g.lease] = f.clock.Now().Add(r.ttl)
		}
		return g, Granted, nil
	}
	if !anyFree && f.exhaustedHint {
		return fakeGrant{}, Exhausted, nil
	}
	return fakeGrant{}, NoMatch, nil
}

func (f *fakeDispatcher) Held(flow string) int {
	f.mu.Lock()
	defer f.unlock()
	f.calls.Held++
	f.expireLocked()
	return f.held[flow]
}

func (f *fakeDispatcher) Release(g fakeGrant) {
	f.mu.Lock()
	f.calls.Release++
	f.releases[g.lease]++
	switch {
	case f.releases[g.lease] > 1:
		f.violations = append(f.violations, fmt.Sprintf("lease %d released %d times", g.lease, f.releases[g.lease]))
	case f.expired[g.lease]:
		f.violations = append(f.violations, fmt.Sprintf("lease %d released after it expired", g.lease))
	default:
		if _, ok := f.live[g.lease]; !ok {
			f.violations = append(f.violations, fmt.Sprintf("lease %d released but never granted", g.lease))
			break
		}
		delete(f.live, g.lease)
		delete(f.expires, g.lease)
		f.busy[g.proxy] = 0
		f.held[g.flow]--
		f.changed = append(f.changed, g.flow)
		f.freed = true
	}
	f.unlock()
}

func (f *fakeDispatcher) NextChange() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.NextChange++
	var next time.Time
	if f.hideExpiries {
		return next
	}
	for _, at := range f.expires {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// freeMatching reports whether a free proxy matches r. Caller holds no lock
// of the fake (it takes its own).
func (f *fakeDispatcher) freeMatching(r fakeReq) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.freeMatchingLocked(r)
}

func (f *fakeDispatcher) freeMatchingLocked(r fakeReq) bool {
	for p := range f.busy {
		if f.busy[p] == 0 && f.matches(p, r) {
			return true
		}
	}
	return false
}

func (f *fakeDispatcher) heldBy(flow string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[flow]
}

func (f *fakeDispatcher) grants() []fakeGrant {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeGrant(nil), f.granted...)
}

func (f *fakeDispatcher) callCounts() fakeCalls {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// liveGrants returns the live leases in lease order.
func (f *fakeDispatcher) liveGrants() []fakeGrant {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]fakeGrant, 0, len(f.live))
	for _, g := range f.live {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lease < out[j].lease })
	return out
}

// endedExactlyOnce returns the violations of "every granted lease ends
// exactly once": double releases, releases of unknown or expired leases,
// and leases still live (leaked).
func (f *fakeDispatcher) endedExactlyOnce() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]string(nil), f.violations...)
	for _, g := range f.granted {
		if _, ok := f.live[g.lease]; ok {
			out = append(out, fmt.Sprintf("lease %d of %s never released", g.lease, g.flow))
		}
	}
	return out
}

// The fake's own bookkeeping is what the exactly-once checks rely on, so it
// gets a negative control: a double release and a leak must be reported.
func TestFakeReportsDoubleReleaseAndLeak(t *testing.T) {
	f := newUniformFake(2)
	g1, v1, _ := f.TryDispatch("a", fakeReq{})
	g2, v2, _ := f.TryDispatch("b", fakeReq{})
	if v1 != Granted || v2 != Granted {
		t.Fatalf("verdicts %v %v, want Granted", v1, v2)
	}
	if got := f.endedExactlyOnce(); len(got) != 2 {
		t.Fatalf("two live leases: got violations %q, want 2 leaks", got)
	}
	f.Release(g1)
	f.Release(g1)
	f.Release(g2)
	got := f.endedExactlyOnce()
	if len(got) != 1 {
		t.Fatalf("got violations %q, want exactly one double release", got)
	}
	f.injectError(errors.New("boom"))
	if _, _, err := f.TryDispatch("a", fakeReq{}); err == nil {
		t.Fatal("injected error not returned")
	}
	if _, v, err := f.TryDispatch("a", fakeReq{selector: "none"}); err != nil || v != NoMatch {
		t.Fatalf("unmatched selector: verdict %v err %v, want NoMatch", v, err)
	}
}

// recordingMetrics is a Metrics fake that records every observation.
type recordingMetrics struct {
	mu        sync.Mutex
	queue     map[int]int
	outcomes  map[string]int
	waits     map[string][]time.Duration
	abandoned int
}

var _ Metrics = (*recordingMetrics)(nil)

func newRecordingMetrics() *recordingMetrics {
	return &recordingMetrics{queue: map[int]int{}, outcomes: map[string]int{}, waits: map[string][]time.Duration{}}
}

func (m *recordingMetrics) FlowControlQueueLength(band, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queue[band] = n
}

func (m *recordingMetrics) FlowControlWait(d time.Duration, outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waits[outcome] = append(m.waits[outcome], d)
}

func (m *recordingMetrics) FlowControlOutcome(outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outcomes[outcome]++
}

func (m *recordingMetrics) FlowControlAbandoned() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.abandoned++
}

func (m *recordingMetrics) outcomeCounts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.outcomes {
		out[k] = v
	}
	return out
}
