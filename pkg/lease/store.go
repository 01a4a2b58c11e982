package lease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
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
	// tombs are the ended leases still reportable (tombs.go).
	tombs map[string]*tombstone
	// tombNames finds ended leases by namespace/name (the newest of a name).
	tombNames map[ProxyKey]string
	// tombQ holds the tombstones in the order they ended (their report
	// windows end in about that order), forgotten ones (tombGone) included.
	tombQ    []*tombstone
	tombHead int
	tombGone int
	// tombsOf queues each holder's tombstones (MaxEndedPerHolder).
	tombsOf map[string]*holderTombs
	flows   map[string]int
	// holders counts live leases per holder (HeldByHolder).
	holders  map[string]int
	revision uint64
	// coolings counts cooldowns started (Changes: a checkpoint must see
	// them, and a report on an ended lease starts one without a revision).
	coolings uint64
	// cooledBy counts the running cooldowns each holder's reports started
	// (Options.MaxCooldownsPerHolder bounds it).
	cooledBy map[string]int
	// readmitFrom and readmitUntil bound the grant times of leases Readmit
	// takes back: granted after the restored state was taken and before it
	// was restored (zero: nothing was restored).
	readmitFrom, readmitUntil time.Time
	// frozen: Freeze was called; lease changes are refused.
	frozen bool
	// sites are the site policies' budgets (sites.go); nil: none.
	sites *sites.Table
	// free counts the indexed proxies: those that can take a lease now.
	free int
	// armed is when Start's timer fires (UnixNano; MaxInt64 before Start);
	// wake re-arms it for an earlier change.
	armed atomic.Int64
	wake  chan struct{}

	subs []subscriber // copy-on-write
	// eventBufs recycles the event slices of store calls (a fresh one per
	// acquire and per release was 9% of the bytes an HTTP lease pair
	// allocated).
	eventBufs sync.Pool
	hooks     []hook // copy-on-write
	nextID    uint64

	// probe observes critical sections; nil in production.
	probe storeProbe
}

// storeProbe observes the store from inside its lock: the invariant tests
// check every grant as it is made and widen race windows with it
// (export_test.go). Both methods run with the store locked and must not call
// the store unless the test removed the lock.
type storeProbe interface {
	// selected runs between choosing a proxy and granting on it.
	selected()
	// granting runs as e is granted to req, on tier of its ladder, at now.
	granting(e *proxyEntry, req *AcquireRequest, tier int, now time.Time)
}

type proxyEntry struct {
	key  ProxyKey
	info ProxyInfo
	keys []indexKey
	// trees are the built avail trees among keys (the entry is in all of
	// them when indexed, in none otherwise).
	trees []*btree.BTreeG[*proxyEntry]
	// leases counts live leases on this proxy, which live holds.
	leases int
	live   map[*leaseEntry]struct{}
	// removed: gone from the fleet but kept while leases or cooldowns remain,
	// so a re-added proxy of the same name keeps its counts and cooldowns.
	removed       bool
	indexed       bool
	globalCooling bool
	// cooldowns maps target ("" = every target) to its cooldown.
	cooldowns map[string]cooling
}

// cooling is one (proxy, target) cooldown: until when, and the holder whose
// report started it (its count toward MaxCooldownsPerHolder).
type cooling struct {
	until  time.Time
	holder string
}

type leaseEntry struct {
	Lease
	proxy *proxyEntry
	// site is the budget of the site policy the lease counts against.
	site      *sites.Budget
	heapIndex int
	// expiresNanos mirrors ExpiresAt for cheap heap comparisons.
	expiresNanos int64
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
		opts:      opts,
		clock:     clk,
		proxies:   map[ProxyKey]*proxyEntry{},
		avail:     map[indexKey]*btree.BTreeG[*proxyEntry]{},
		members:   map[indexKey]map[*proxyEntry]struct{}{},
		leases:    map[string]*leaseEntry{},
		names:     map[ProxyKey]string{},
		tombs:     map[string]*tombstone{},
		tombNames: map[ProxyKey]string{},
		tombsOf:   map[string]*holderTombs{},
		flows:     map[string]int{},
		holders:   map[string]int{},
		cooledBy:  map[string]int{},
		wake:      make(chan struct{}, 1),
	}
	s.armed.Store(math.MaxInt64)
	s.mu = &s.realMu
	return s, nil
}

// Options returns the effective options (defaults filled in).
func (s *Store) Options() Options { return s.opts }

// MaxTTL returns the longest TTL Acquire and Renew accept.
func (s *Store) MaxTTL() time.Duration { return s.opts.MaxTTL }

// Freeze makes the store refuse every lease change from now on (acquire,
// renew, report, release, readmit: ErrFrozen), so that a State taken
// afterwards is final: the replica that stops serving takes its last
// checkpoint after it. Expiries still happen (a restore replays them), and
// proxies still come and go. There is no thaw: a replica serves again only
// as a new process.
func (s *Store) Freeze() {
	s.mu.Lock()
	s.frozen = true
	s.mu.Unlock()
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥1.24)
	return hex.EncodeToString(b[:])
}

// now is the clock's time without its monotonic reading: every time the store
// compares is a wall time it also hands out (expiresAt), and the expiry heap
// orders by UnixNano, so all comparisons must agree with wall-time order.
func (s *Store) now() time.Time { return s.clock.Now().Round(0) }
