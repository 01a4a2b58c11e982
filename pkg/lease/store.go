package lease

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Store is the in-memory lease store. All methods are safe for concurrent use.
//
// Every method first applies, under the one lock, the lease expiries and
// cooldown ends that are due at the clock's now. Notifications (Subscribe
// events, OnCapacity hooks) run after the lock is released, on the goroutine
// of whichever call observed the change — read-only calls included.
type Store struct {
	opts  Options
	clock clock.WithTicker

	// mu is &realMu; the negative-control test swaps in a no-op locker to show
	// that the invariant checker catches a store without its lock.
	mu     sync.Locker
	realMu sync.Mutex
	// deliverMu is taken before mu is released when events must be delivered,
	// so subscribers see events in revision order without the store lock held.
	deliverMu sync.Mutex

	proxies map[ProxyKey]*proxyEntry
	// avail holds, per index key that some request has used, the proxies
	// that can take a lease right now (healthy, under capacity, not globally
	// cooling), ordered by lessEntry. Trees are built on first use, so a proxy
	// pays on every acquire/release only for the index sets requests really
	// query, not for every attribute it carries.
	avail map[indexKey]*btree.BTreeG[*proxyEntry]
	// members holds, per index key, every proxy of the fleet (to build trees
	// and for NoMatchError counts).
	members map[indexKey]map[*proxyEntry]struct{}

	leases   map[string]*leaseEntry
	names    map[ProxyKey]string // (lease namespace, lease name) → ID
	expiries leaseHeap
	cools    coolHeap
	tombs    map[string]tombstone
	tombQ    []tombRef
	tombHead int
	flows    map[string]int
	revision uint64

	subs   []subscriber // copy-on-write
	hooks  []hook       // copy-on-write
	nextID uint64

	// Test seams; nil in production.
	afterSelect func()
	onGrant     func(e *proxyEntry, req *AcquireRequest, now time.Time)
}

type proxyEntry struct {
	key  ProxyKey
	info ProxyInfo
	keys []indexKey
	// trees are the built avail trees among keys (the entry is in all of
	// them when indexed, in none otherwise).
	trees []*btree.BTreeG[*proxyEntry]
	// leases counts live leases on this proxy.
	leases int
	// removed: gone from the fleet but kept while leases or cooldowns remain,
	// so a re-added proxy of the same name keeps its counts and cooldowns.
	removed       bool
	indexed       bool
	globalCooling bool
	// cooldowns maps target ("" = every target) to the end of its cooldown.
	cooldowns map[string]time.Time
}

// indexKey names one index set: every proxy of a namespace ("" = all
// namespaces), or those of them carrying attribute k=v.
type indexKey struct {
	ns   string
	attr bool
	k, v string
}

type leaseEntry struct {
	Lease
	proxy     *proxyEntry
	heapIndex int
	// expiresNanos mirrors ExpiresAt for cheap heap comparisons.
	expiresNanos int64
}

type tombstone struct {
	proxy  ProxyKey
	target string
	holder string
	until  time.Time
}

type tombRef struct {
	id    string
	until time.Time
}

type cooldownItem struct {
	e      *proxyEntry
	target string
	until  time.Time
}

type subscriber struct {
	id uint64
	fn func(Event)
}

type hook struct {
	id uint64
	fn func()
}

// pending collects what to tell the outside world once the lock is released.
type pending struct {
	events   []Event
	capacity bool
}

// New returns an empty store. A nil clock means the real clock.
func New(opts Options, clk clock.WithTicker) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("lease store options: %w", err)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &Store{
		opts:    opts,
		clock:   clk,
		proxies: map[ProxyKey]*proxyEntry{},
		avail:   map[indexKey]*btree.BTreeG[*proxyEntry]{},
		members: map[indexKey]map[*proxyEntry]struct{}{},
		leases:  map[string]*leaseEntry{},
		names:   map[ProxyKey]string{},
		tombs:   map[string]tombstone{},
		flows:   map[string]int{},
	}
	s.mu = &s.realMu
	return s, nil
}

// Options returns the effective options (defaults filled in).
func (s *Store) Options() Options { return s.opts }

// MaxTTL returns the longest TTL Acquire and Renew accept.
func (s *Store) MaxTTL() time.Duration { return s.opts.MaxTTL }

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥1.24)
	return hex.EncodeToString(b[:])
}

// lessEntry is the selection order: fewest live leases, then lowest latency,
// then name (and namespace, to make the order total across namespaces).
func lessEntry(a, b *proxyEntry) bool {
	if a.leases != b.leases {
		return a.leases < b.leases
	}
	if a.info.LatencyMillis != b.info.LatencyMillis {
		return a.info.LatencyMillis < b.info.LatencyMillis
	}
	if a.info.Name != b.info.Name {
		return a.info.Name < b.info.Name
	}
	return a.info.Namespace < b.info.Namespace
}

// btreeDegree: small nodes suit pointer items that move on every grant and
// release (google/btree's own benchmarks use 32; 16 keeps node copies short).
const btreeDegree = 16

func keysFor(info ProxyInfo) []indexKey {
	keys := make([]indexKey, 0, 2*(len(info.Attributes)+1))
	keys = append(keys, indexKey{ns: info.Namespace})
	if info.Namespace != "" {
		keys = append(keys, indexKey{})
	}
	for k, v := range info.Attributes {
		keys = append(keys, indexKey{ns: info.Namespace, attr: true, k: k, v: v})
		if info.Namespace != "" {
			keys = append(keys, indexKey{attr: true, k: k, v: v})
		}
	}
	return keys
}

func (s *Store) eligible(e *proxyEntry) bool {
	return !e.removed && e.info.Healthy && e.leases < s.opts.MaxLeasesPerProxy && !e.globalCooling
}

func (s *Store) indexLocked(e *proxyEntry) {
	if e.indexed || !s.eligible(e) {
		return
	}
	for _, t := range e.trees {
		t.ReplaceOrInsert(e)
	}
	e.indexed = true
}

func (s *Store) unindexLocked(e *proxyEntry) {
	if !e.indexed {
		return
	}
	for _, t := range e.trees {
		t.Delete(e)
	}
	e.indexed = false
}

// treeLocked returns the avail tree of k, building it on first use; nil when
// no proxy of the fleet has key k.
func (s *Store) treeLocked(k indexKey) *btree.BTreeG[*proxyEntry] {
	if t := s.avail[k]; t != nil {
		return t
	}
	m := s.members[k]
	if len(m) == 0 {
		return nil
	}
	t := btree.NewG(btreeDegree, lessEntry)
	for e := range m {
		e.trees = append(e.trees, t)
		if e.indexed {
			t.ReplaceOrInsert(e)
		}
	}
	s.avail[k] = t
	return t
}

// setLeasesLocked changes e's lease count, which is part of the index order.
func (s *Store) setLeasesLocked(e *proxyEntry, n int) {
	s.unindexLocked(e)
	e.leases = n
	s.indexLocked(e)
}

// addMembersLocked requires e to be unindexed.
func (s *Store) addMembersLocked(e *proxyEntry) {
	e.trees = e.trees[:0]
	for _, k := range e.keys {
		m := s.members[k]
		if m == nil {
			m = map[*proxyEntry]struct{}{}
			s.members[k] = m
		}
		m[e] = struct{}{}
		if t := s.avail[k]; t != nil {
			e.trees = append(e.trees, t)
		}
	}
}

// removeMembersLocked requires e to be unindexed.
func (s *Store) removeMembersLocked(e *proxyEntry) {
	for _, k := range e.keys {
		m := s.members[k]
		delete(m, e)
		if len(m) == 0 {
			delete(s.members, k)
			delete(s.avail, k)
		}
	}
	e.trees = e.trees[:0]
}

func (s *Store) forgetIfUnusedLocked(e *proxyEntry) {
	if e.removed && e.leases == 0 && len(e.cooldowns) == 0 && s.proxies[e.key] == e {
		delete(s.proxies, e.key)
	}
}

// entryLocked returns the entry for key, creating a removed placeholder when
// the proxy is gone (a late report must still start a cooldown).
func (s *Store) entryLocked(key ProxyKey) *proxyEntry {
	if e := s.proxies[key]; e != nil {
		return e
	}
	e := &proxyEntry{key: key, info: ProxyInfo{Namespace: key.Namespace, Name: key.Name}, removed: true}
	s.proxies[key] = e
	return e
}

func (e *proxyEntry) coolingFor(target string, now time.Time) bool {
	if len(e.cooldowns) == 0 {
		return false
	}
	until, ok := e.cooldowns[target]
	return ok && until.After(now)
}

func matches(e *proxyEntry, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := e.info.Attributes[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// unlockAndNotify releases the lock and delivers what p collected: events in
// revision order (deliverMu is taken before mu is released), then hooks.
func (s *Store) unlockAndNotify(p *pending) {
	var hooks []hook
	if p.capacity {
		hooks = s.hooks
	}
	subs := s.subs
	if len(p.events) > 0 && len(subs) > 0 {
		s.deliverMu.Lock()
		s.mu.Unlock()
		for _, ev := range p.events {
			for _, sub := range subs {
				sub.fn(ev)
			}
		}
		s.deliverMu.Unlock()
	} else {
		s.mu.Unlock()
	}
	for _, h := range hooks {
		h.fn()
	}
}

func (s *Store) emitLocked(p *pending, t EventType, r Reason, le *leaseEntry) {
	if len(s.subs) == 0 {
		return
	}
	p.events = append(p.events, Event{Type: t, Reason: r, Lease: le.Lease, Revision: le.Revision})
}

// advanceLocked applies everything due at now: lease expiries (in expiry
// order), cooldown ends, and forgetting ended leases past their report window.
func (s *Store) advanceLocked(now time.Time, p *pending) {
	for len(s.expiries) > 0 && !s.expiries[0].ExpiresAt.After(now) {
		le := heap.Pop(&s.expiries).(*leaseEntry)
		s.endLocked(le, le.ExpiresAt, Expired, p)
	}
	for len(s.cools) > 0 && !s.cools[0].until.After(now) {
		it := heap.Pop(&s.cools).(*cooldownItem)
		e := it.e
		if cur, ok := e.cooldowns[it.target]; !ok || !cur.Equal(it.until) {
			continue // superseded by a later cooldown for the same pair
		}
		delete(e.cooldowns, it.target)
		if it.target == "" {
			e.globalCooling = false
			s.indexLocked(e)
		}
		p.capacity = p.capacity || e.indexed
		s.forgetIfUnusedLocked(e)
	}
	for s.tombHead < len(s.tombQ) && !s.tombQ[s.tombHead].until.After(now) {
		r := s.tombQ[s.tombHead]
		s.tombQ[s.tombHead] = tombRef{}
		s.tombHead++
		if t, ok := s.tombs[r.id]; ok && t.until.Equal(r.until) {
			delete(s.tombs, r.id)
		}
	}
	if s.tombHead > 256 && s.tombHead*2 > len(s.tombQ) {
		n := copy(s.tombQ, s.tombQ[s.tombHead:])
		clear(s.tombQ[n:])
		s.tombQ = s.tombQ[:n]
		s.tombHead = 0
	}
}

// endLocked removes a live lease (already popped from the expiry heap) and
// remembers it for reports until endedAt + CooldownWindow.
func (s *Store) endLocked(le *leaseEntry, endedAt time.Time, reason Reason, p *pending) {
	delete(s.leases, le.ID)
	if nk := (ProxyKey{Namespace: le.Namespace, Name: le.Name}); s.names[nk] == le.ID {
		delete(s.names, nk)
	}
	if n := s.flows[le.Flow] - 1; n > 0 {
		s.flows[le.Flow] = n
	} else {
		delete(s.flows, le.Flow)
	}
	until := endedAt.Add(s.opts.CooldownWindow)
	s.tombs[le.ID] = tombstone{proxy: le.proxy.key, target: le.Target, holder: le.Holder, until: until}
	s.tombQ = append(s.tombQ, tombRef{id: le.ID, until: until})
	e := le.proxy
	s.setLeasesLocked(e, e.leases-1)
	p.capacity = p.capacity || e.indexed
	s.forgetIfUnusedLocked(e)
	s.revision++
	le.Revision = s.revision
	s.emitLocked(p, Deleted, reason, le)
}

func (s *Store) coolLocked(e *proxyEntry, target string, until time.Time) {
	if cur, ok := e.cooldowns[target]; ok && !until.After(cur) {
		return
	}
	if e.cooldowns == nil {
		e.cooldowns = map[string]time.Time{}
	}
	e.cooldowns[target] = until
	heap.Push(&s.cools, &cooldownItem{e: e, target: target, until: until})
	if target == "" && !e.globalCooling {
		s.unindexLocked(e)
		e.globalCooling = true
	}
}

func (s *Store) ttlFor(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl < 0:
		return 0, ErrNegativeTTL
	case ttl == 0:
		return s.opts.DefaultTTL, nil
	case ttl > s.opts.MaxTTL:
		return 0, &TTLError{Requested: ttl, Max: s.opts.MaxTTL}
	}
	return ttl, nil
}

// UpsertProxy adds or updates a proxy of the fleet. Unchanged information is
// a cheap no-op, so it can be called on every cache update.
func (s *Store) UpsertProxy(info ProxyInfo) {
	info = info.clone()
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	e := s.proxies[info.Key()]
	switch {
	case e == nil:
		e = &proxyEntry{key: info.Key()}
		s.proxies[e.key] = e
	case !e.removed && e.info.equal(info):
		s.unlockAndNotify(&p)
		return
	}
	wasIndexed := e.indexed
	attrsChanged := e.removed || !maps.Equal(e.info.Attributes, info.Attributes)
	s.unindexLocked(e)
	if !e.removed {
		s.removeMembersLocked(e)
	}
	e.info = info
	e.removed = false
	e.keys = keysFor(info)
	s.addMembersLocked(e)
	s.indexLocked(e)
	// Capacity appears when the proxy becomes available, or when its
	// attributes change (a waiting selector may match it now).
	p.capacity = p.capacity || (e.indexed && (!wasIndexed || attrsChanged))
	s.unlockAndNotify(&p)
}

// RemoveProxy takes a proxy out of the fleet. Its live leases stay until
// released or expired (the holder finds out when the proxy stops answering);
// its cooldowns are kept in case a proxy of the same name comes back.
func (s *Store) RemoveProxy(key ProxyKey) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	if e := s.proxies[key]; e != nil && !e.removed {
		s.unindexLocked(e)
		s.removeMembersLocked(e)
		e.removed = true
		s.forgetIfUnusedLocked(e)
	}
	s.unlockAndNotify(&p)
}

// ListProxies returns the fleet (namespace "" = every namespace), sorted by
// namespace and name. It never fails; the error is for the discovery Lister
// interface. The ctx is unused.
func (s *Store) ListProxies(_ context.Context, namespace string) ([]ProxyInfo, error) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	out := make([]ProxyInfo, 0, len(s.proxies))
	for _, e := range s.proxies {
		if e.removed || (namespace != "" && e.info.Namespace != namespace) {
			continue
		}
		out = append(out, e.info)
	}
	s.unlockAndNotify(&p)
	slices.SortFunc(out, func(a, b ProxyInfo) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// Acquire grants a lease on the best eligible proxy: healthy, in the
// namespace, matching the selector, under MaxLeasesPerProxy, not cooling down
// for the target (nor for every target); the best is the one with the fewest
// live leases, then the lowest latency, then the name. Selection walks an
// index in that order, so its cost does not grow with the fleet.
//
// Errors: *NoMatchError (IsNoMatch) with counts, *TTLError (IsTTLTooLong),
// ErrNegativeTTL, *AlreadyExistsError (a named request colliding with a live lease).
func (s *Store) Acquire(req AcquireRequest) (*Lease, error) { return s.acquire(req, true) }

// TryAcquire is Acquire without the diagnostic counts: on no match it returns
// ErrNoMatch, cheaply. Flow control calls it while dispatching waiters.
func (s *Store) TryAcquire(req AcquireRequest) (*Lease, error) { return s.acquire(req, false) }

func (s *Store) acquire(req AcquireRequest, explain bool) (*Lease, error) {
	ttl, err := s.ttlFor(req.TTL)
	if err != nil {
		return nil, fmt.Errorf("acquiring a lease: %w", err)
	}
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	if req.Name != "" && req.Namespace != "" {
		if _, taken := s.names[ProxyKey{Namespace: req.Namespace, Name: req.Name}]; taken {
			s.unlockAndNotify(&p)
			return nil, &AlreadyExistsError{Namespace: req.Namespace, Name: req.Name}
		}
	}
	e := s.selectLocked(&req, now)
	if s.afterSelect != nil {
		s.afterSelect()
	}
	if e == nil {
		err := ErrNoMatch
		if explain {
			err = s.explainLocked(&req, now)
		}
		s.unlockAndNotify(&p)
		return nil, err
	}
	if req.Name != "" && req.Namespace == "" {
		if _, taken := s.names[ProxyKey{Namespace: e.info.Namespace, Name: req.Name}]; taken {
			s.unlockAndNotify(&p)
			return nil, &AlreadyExistsError{Namespace: e.info.Namespace, Name: req.Name}
		}
	}
	le, err := s.grantLocked(e, &req, ttl, now, &p)
	if err != nil {
		s.unlockAndNotify(&p)
		return nil, err
	}
	out := le.Lease
	s.unlockAndNotify(&p)
	return &out, nil
}

func (s *Store) selectLocked(req *AcquireRequest, now time.Time) *proxyEntry {
	best := s.treeLocked(indexKey{ns: req.Namespace})
	if best == nil {
		return nil
	}
	for k, v := range req.Selector {
		t := s.treeLocked(indexKey{ns: req.Namespace, attr: true, k: k, v: v})
		if t == nil {
			return nil
		}
		if t.Len() < best.Len() {
			best = t
		}
	}
	var found *proxyEntry
	// Walk in selection order; the first proxy passing the remaining checks is
	// the answer. Only the other selector pairs and per-target cooldowns are
	// checked here (capacity, health and global cooldown are the index itself).
	best.Ascend(func(e *proxyEntry) bool {
		if !matches(e, req.Selector) || (req.Target != "" && e.coolingFor(req.Target, now)) {
			return true
		}
		found = e
		return false
	})
	return found
}

func (s *Store) explainLocked(req *AcquireRequest, now time.Time) *NoMatchError {
	var c NoMatchError
	set := s.members[indexKey{ns: req.Namespace}]
	for k, v := range req.Selector {
		m := s.members[indexKey{ns: req.Namespace, attr: true, k: k, v: v}]
		if len(m) < len(set) {
			set = m
		}
	}
	for e := range set {
		if !matches(e, req.Selector) {
			continue
		}
		c.Considered++
		switch {
		case !e.info.Healthy:
			c.Unhealthy++
		case e.leases >= s.opts.MaxLeasesPerProxy:
			c.AtCapacity++
		case e.globalCooling || (req.Target != "" && e.coolingFor(req.Target, now)):
			c.InCooldown++
		}
	}
	return &c
}

// Diagnose returns, without acquiring anything, the counts Acquire would put
// in its NoMatchError for req right now (flow control uses it to explain a
// wait that ran out).
func (s *Store) Diagnose(req AcquireRequest) *NoMatchError {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	c := s.explainLocked(&req, now)
	s.unlockAndNotify(&p)
	return c
}

func (s *Store) grantLocked(e *proxyEntry, req *AcquireRequest, ttl time.Duration, now time.Time, p *pending) (*leaseEntry, error) {
	ns := e.info.Namespace
	var id string
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return nil, fmt.Errorf("acquiring a lease: the ID generator keeps returning IDs in use (last %q)", id)
		}
		id = s.opts.NewID()
		_, live := s.leases[id]
		_, ended := s.tombs[id]
		_, named := s.names[ProxyKey{Namespace: ns, Name: id}]
		if !live && !ended && !(named && req.Name == "") {
			break
		}
	}
	name := req.Name
	if name == "" {
		name = id
	}
	if s.onGrant != nil {
		s.onGrant(e, req, now)
	}
	s.revision++
	le := &leaseEntry{
		Lease: Lease{
			ID:         id,
			Namespace:  ns,
			Name:       name,
			Holder:     req.Holder,
			Flow:       req.Flow,
			Target:     req.Target,
			Proxy:      e.info,
			AcquiredAt: now,
			ExpiresAt:  now.Add(ttl),
			TTL:        ttl,
			Revision:   s.revision,
		},
		proxy:        e,
		expiresNanos: now.Add(ttl).UnixNano(),
	}
	s.leases[id] = le
	s.names[ProxyKey{Namespace: ns, Name: name}] = id
	s.flows[req.Flow]++
	heap.Push(&s.expiries, le)
	s.setLeasesLocked(e, e.leases+1)
	s.emitLocked(p, Added, Acquired, le)
	return le, nil
}

// Release ends a live lease. It is idempotent: it reports whether this call
// ended the lease (false for unknown, already released or expired IDs). A
// released lease stays reportable for CooldownWindow.
func (s *Store) Release(id string) bool {
	ok, _ := s.ReleaseAs(AnyHolder, id)
	return ok
}

// ReleaseAs is Release on behalf of holder: a live lease held by another
// holder is left alone and the answer is a *NotHolderError. AnyHolder
// releases whoever holds it.
func (s *Store) ReleaseAs(holder, id string) (bool, error) {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	le := s.leases[id]
	if le != nil && !mayChange(holder, le.Holder) {
		s.unlockAndNotify(&p)
		return false, &NotHolderError{ID: id}
	}
	if le != nil {
		heap.Remove(&s.expiries, le.heapIndex)
		s.endLocked(le, now, Released, &p)
	}
	s.unlockAndNotify(&p)
	return le != nil, nil
}

// AnyHolder is the holder argument of a caller whose right to change any
// lease was decided elsewhere (Kubernetes RBAC on ProxyLeases).
const AnyHolder = ""

// mayChange reports whether caller may change a lease held by holder.
func mayChange(caller, holder string) bool { return caller == AnyHolder || caller == holder }

// Report records how a request through the leased proxy went. rate_limited
// and banned put the (proxy, target) pair in cooldown for CooldownWindow
// (extending, never shortening, a running one). The target falls back from
// the report to the lease's target to "" (every target of that proxy). A
// lease that ended (released or expired) stays reportable for CooldownWindow
// after it ended: a late report lands exactly when the proxy is being
// rate-limited.
//
// Errors: ErrInvalidResult (checked first), ErrUnknownLease.
func (s *Store) Report(id, result, target string) error {
	return s.ReportAs(AnyHolder, id, result, target)
}

// ReportAs is Report on behalf of holder: a report on a lease (live or
// ended) of another holder records nothing and is a *NotHolderError.
func (s *Store) ReportAs(holder, id, result, target string) error {
	if !ValidResult(result) {
		return fmt.Errorf("reporting %q on lease %s: %w", result, id, ErrInvalidResult)
	}
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	var e *proxyEntry
	var leaseTarget string
	le := s.leases[id]
	if le != nil {
		if !mayChange(holder, le.Holder) {
			s.unlockAndNotify(&p)
			return &NotHolderError{ID: id}
		}
		e, leaseTarget = le.proxy, le.Target
	} else if t, ok := s.tombs[id]; ok && t.until.After(now) {
		if !mayChange(holder, t.holder) {
			s.unlockAndNotify(&p)
			return &NotHolderError{ID: id}
		}
		e, leaseTarget = s.entryLocked(t.proxy), t.target
	} else {
		s.unlockAndNotify(&p)
		return fmt.Errorf("reporting on lease %s: %w", id, ErrUnknownLease)
	}
	if target == "" {
		target = leaseTarget
	}
	if result != ResultOK {
		s.coolLocked(e, target, now.Add(s.opts.CooldownWindow))
	}
	s.forgetIfUnusedLocked(e)
	if le != nil {
		s.revision++
		le.LastResult = result
		le.Revision = s.revision
		s.emitLocked(&p, Modified, Reported, le)
	}
	s.unlockAndNotify(&p)
	return nil
}

// Renew sets a live lease to expire ttl from now (zero: its current TTL). The
// new expiry is never beyond MaxTTL from now: a longer ttl is a *TTLError.
// Errors: ErrNegativeTTL, *TTLError, ErrLeaseEnded (released or expired
// recently), ErrUnknownLease.
func (s *Store) Renew(id string, ttl time.Duration) (*Lease, error) {
	return s.RenewAs(AnyHolder, id, ttl)
}

// RenewAs is Renew on behalf of holder: a live lease of another holder is
// left as it is and the answer is a *NotHolderError.
func (s *Store) RenewAs(holder, id string, ttl time.Duration) (*Lease, error) {
	if ttl != 0 {
		if _, err := s.ttlFor(ttl); err != nil {
			return nil, fmt.Errorf("renewing lease %s: %w", id, err)
		}
	}
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	le := s.leases[id]
	if le == nil {
		t, ended := s.tombs[id]
		s.unlockAndNotify(&p)
		if ended && t.until.After(now) {
			if !mayChange(holder, t.holder) {
				return nil, &NotHolderError{ID: id}
			}
			return nil, fmt.Errorf("renewing lease %s: %w", id, ErrLeaseEnded)
		}
		return nil, fmt.Errorf("renewing lease %s: %w", id, ErrUnknownLease)
	}
	if !mayChange(holder, le.Holder) {
		s.unlockAndNotify(&p)
		return nil, &NotHolderError{ID: id}
	}
	if ttl == 0 {
		ttl = min(le.TTL, s.opts.MaxTTL)
	}
	le.TTL = ttl
	le.ExpiresAt = now.Add(ttl)
	le.expiresNanos = le.ExpiresAt.UnixNano()
	heap.Fix(&s.expiries, le.heapIndex)
	s.revision++
	le.Revision = s.revision
	s.emitLocked(&p, Modified, Renewed, le)
	out := le.Lease
	s.unlockAndNotify(&p)
	return &out, nil
}

// Get returns a live lease by ID.
func (s *Store) Get(id string) (Lease, bool) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	var out Lease
	le, ok := s.leases[id]
	if ok {
		out = le.Lease
	}
	s.unlockAndNotify(&p)
	return out, ok
}

// GetByName returns a live lease by namespace and name.
func (s *Store) GetByName(namespace, name string) (Lease, bool) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	var out Lease
	id, ok := s.names[ProxyKey{Namespace: namespace, Name: name}]
	if ok {
		out = s.leases[id].Lease
	}
	s.unlockAndNotify(&p)
	return out, ok
}

// List returns the live leases of a namespace ("" = all), sorted by
// namespace and name.
func (s *Store) List(namespace string) []Lease {
	out, _ := s.Snapshot(namespace)
	return out
}

// Snapshot is List plus the store revision it reflects. A watch that calls
// Subscribe first and Snapshot second sees every change exactly once by
// dropping events whose Revision is not above the snapshot's.
func (s *Store) Snapshot(namespace string) ([]Lease, uint64) {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	out := make([]Lease, 0, len(s.leases))
	for _, le := range s.leases {
		if namespace == "" || le.Namespace == namespace {
			out = append(out, le.Lease)
		}
	}
	rev := s.revision
	s.unlockAndNotify(&p)
	slices.SortFunc(out, func(a, b Lease) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, rev
}

// Counts returns the number of live leases per proxy (proxies without leases
// are absent). Cost: O(live leases).
func (s *Store) Counts() map[ProxyKey]int {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	out := make(map[ProxyKey]int, len(s.leases))
	for _, le := range s.leases {
		out[le.proxy.key]++
	}
	s.unlockAndNotify(&p)
	return out
}

// Active returns the number of live leases.
func (s *Store) Active() int {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	n := len(s.leases)
	s.unlockAndNotify(&p)
	return n
}

// HeldBy returns the number of live leases of a flow, in O(1) (amortised
// over the expiries it applies).
func (s *Store) HeldBy(flow string) int {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	n := s.flows[flow]
	s.unlockAndNotify(&p)
	return n
}

// NextChange returns the earliest future time at which capacity may appear
// by itself (a lease expiry or a cooldown end), or the zero time when nothing
// is scheduled. Flow control arms its timer on it and calls Sweep (or any
// store method) when it fires.
func (s *Store) NextChange() time.Time {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	for len(s.cools) > 0 {
		it := s.cools[0]
		if cur, ok := it.e.cooldowns[it.target]; ok && cur.Equal(it.until) {
			break
		}
		heap.Pop(&s.cools) // superseded
	}
	var next time.Time
	if len(s.expiries) > 0 {
		next = s.expiries[0].ExpiresAt
	}
	if len(s.cools) > 0 && (next.IsZero() || s.cools[0].until.Before(next)) {
		next = s.cools[0].until
	}
	s.unlockAndNotify(&p)
	return next
}

// OnCapacity registers a hook called whenever capacity may have appeared: a
// release, an expiry, a cooldown end, a proxy added, turned healthy or with
// new attributes. Hooks run after the store lock is released, on the
// goroutine of the store call that observed the change — which may be any
// store call, including one the hook's owner makes while holding its own
// locks. So a hook must not block and must not take locks: signal (a
// non-blocking send on a buffered channel) and do the work elsewhere.
// Spurious calls are possible. The returned func unregisters the hook.
func (s *Store) OnCapacity(fn func()) (cancel func()) {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.hooks = append(slices.Clone(s.hooks), hook{id: id, fn: fn})
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.hooks = slices.DeleteFunc(slices.Clone(s.hooks), func(h hook) bool { return h.id == id })
			s.mu.Unlock()
		})
	}
}

// Subscribe registers fn for every lease event (Added/Acquired,
// Modified/Renewed, Modified/Reported, Deleted/Released, Deleted/Expired).
// Events arrive in Revision order, one at a time, without the store lock
// held, on the goroutine of the store call that caused them. fn must not
// block and must not call the store: delivery is serialised, so a blocked fn
// stalls every store call that produces events, and a store call from fn
// deadlocks. Enqueue without blocking (e.g. a buffered channel; on overflow,
// end the watch and let the client re-list). A watch that calls Subscribe
// first and Snapshot second sees every change once: drop events whose
// Revision is not above the snapshot's. A cancelled subscriber may still get
// events already being delivered.
func (s *Store) Subscribe(fn func(Event)) (cancel func()) {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.subs = append(slices.Clone(s.subs), subscriber{id: id, fn: fn})
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.subs = slices.DeleteFunc(slices.Clone(s.subs), func(x subscriber) bool { return x.id == id })
			s.mu.Unlock()
		})
	}
}

// Sweep applies every expiry and cooldown end due now (emitting their events
// and hooks) and frees ended leases past their report window.
func (s *Store) Sweep() {
	var p pending
	s.mu.Lock()
	s.advanceLocked(s.now(), &p)
	s.unlockAndNotify(&p)
}

// Start runs the sweep every SweepInterval until ctx ends. It is a manager
// Runnable that every replica runs (see NeedLeaderElection).
func (s *Store) Start(ctx context.Context) error {
	log.FromContext(ctx).Info("lease sweep started", "sweepInterval", s.opts.SweepInterval)
	t := s.clock.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			s.Sweep()
		}
	}
}

// NeedLeaderElection is false: lease state is per process and the sweep only
// frees memory, so every replica runs it.
func (s *Store) NeedLeaderElection() bool { return false }

type leaseHeap []*leaseEntry

func (h leaseHeap) Len() int { return len(h) }
func (h leaseHeap) Less(i, j int) bool {
	if h[i].expiresNanos != h[j].expiresNanos {
		return h[i].expiresNanos < h[j].expiresNanos
	}
	return h[i].ID < h[j].ID
}
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}
func (h *leaseHeap) Push(x any) {
	le := x.(*leaseEntry)
	le.heapIndex = len(*h)
	*h = append(*h, le)
}
func (h *leaseHeap) Pop() any {
	old := *h
	le := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	le.heapIndex = -1
	return le
}

type coolHeap []*cooldownItem

func (h coolHeap) Len() int           { return len(h) }
func (h coolHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h coolHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *coolHeap) Push(x any)        { *h = append(*h, x.(*cooldownItem)) }
func (h *coolHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// now is the clock's time without its monotonic reading: every time the store
// compares is a wall time it also hands out (expiresAt), and the expiry heap
// orders by UnixNano, so all comparisons must agree with wall-time order.
func (s *Store) now() time.Time { return s.clock.Now().Round(0) }
