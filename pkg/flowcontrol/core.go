package flowcontrol

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Core is the pure part of the controller: queues, fairness, deadlines and
// accounting under one mutex, with time read from an injected clock. It
// waits for nothing but that mutex (OnCapacity and HeldChanged not even for
// it) and starts no goroutine; it reports, through NextWakeup, when it next
// needs Advance to be called. Controller adds the timer and the
// blocking EnqueueAndWait on top. Safe for concurrent use.
type Core[R, G any] struct {
	d       Dispatcher[R, G]
	clock   clock.PassiveClock
	opts    Options
	metrics Metrics
	policy  policy[R, G]
	less    func(a, b *flowQueue[R, G]) bool
	// pauses stops the core at chosen points for the race tests
	// (export_test.go); nil in production.
	pauses pauser[R, G]
	// classify is the dispatcher's Classifier, nil if it has none (one
	// class per flow: FIFO within a flow).
	classify func(R) string
	// onWake is called under the mutex when the wakeup instant changes (zero:
	// none). Controller uses it to re-arm its single timer.
	onWake func(now, at time.Time)
	// onQueue is called under the mutex when a request is queued.
	onQueue func()

	mu    sync.Mutex
	bands map[int]*band[R, G]
	order []*band[R, G] // bands with waiters, highest priority first
	// owners counts the waiting requests of each owner (ownerOf);
	// ownerFlows are the waiting flows of each owner, in every band.
	owners     map[string]int
	ownerFlows map[string][]*flowQueue[R, G]
	deadlines  deadlineHeap[R, G]
	fresh      []*flowQueue[R, G]
	scratch    []*flowQueue[R, G]
	skipped    []*flowQueue[R, G]
	parked     []*flowQueue[R, G]
	tmp        flowHeap[R, G]
	// exhausted: the dispatcher said nothing is free, and no capacity event
	// happened since; new requests then queue without asking it.
	exhausted  bool
	nextChange time.Time
	wakeAt     time.Time
	shutdown   bool
	seq        uint64
	// turn is the last turn handed to a served flow (from servedBase up),
	// joined the last handed to a flow never served (from 1 up); idle
	// remembers the turns of flows that stopped waiting (see turns.go).
	turn, joined uint64
	idle         turnMemory
	// remember: the policy keeps turns across idle spells and counts
	// fast-path grants as turns.
	remember bool
	stats    Stats
	// releases are grants to give back once the mutex is released.
	releases []G
	// capacity is a pending capacity signal (see OnCapacity and unlock).
	capacity atomic.Bool

	// track: Held changes are reported through HeldChanged, so cached Held
	// values are trusted. dirty lists the flows reported since the last
	// sync, under its own leaf mutex (HeldChanged may run while mu is held).
	track      bool
	dmu        sync.Mutex
	dirty      []string
	dirtySpare []string
	dirtyAll   bool
}

// maxDirty bounds the reported-changes list; beyond it every band is
// refreshed in full at its next round.
const maxDirty = 4096

// HeldChanged reports that Held(flow) changed other than by this core's own
// grant (a release, an expiry, an acquisition that bypassed the queue); flow
// may also name an owner (Request.Owner), for a Dispatcher whose Held of a
// flow is what its owner holds: every waiting flow of that owner is then
// re-read. It
// only matters with Options.HeldChangeNotifications; it never blocks on the
// core's mutex, so it may be called from inside Dispatcher calls.
func (c *Core[R, G]) HeldChanged(flow string) {
	if !c.track {
		return
	}
	c.dmu.Lock()
	if len(c.dirty) < maxDirty {
		c.dirty = append(c.dirty, flow)
	} else {
		c.dirtyAll = true
	}
	c.dmu.Unlock()
}

// NewCore returns a core over d. It reads time from clk only.
func NewCore[R, G any](d Dispatcher[R, G], clk clock.PassiveClock, opts Options) *Core[R, G] {
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	m := opts.Metrics
	if m == nil {
		m = NopMetrics{}
	}
	c := &Core[R, G]{
		d:          d,
		clock:      clk,
		opts:       opts,
		metrics:    m,
		bands:      map[int]*band[R, G]{},
		owners:     map[string]int{},
		ownerFlows: map[string][]*flowQueue[R, G]{},
		track:      opts.HeldChangeNotifications,
		turn:       servedBase,
		idle:       newTurnMemory(rememberLimit(opts)),
	}
	if cl, ok := d.(Classifier[R]); ok {
		c.classify = cl.Class
	}
	c.usePolicy(fairPolicy[R, G]{})
	c.tmp.idx = temporaryIdx[R, G]
	return c
}

// usePolicy must be called before the first request.
func (c *Core[R, G]) usePolicy(p policy[R, G]) {
	c.policy = p
	c.remember = p.remembersTurns()
	c.less = p.less
	c.tmp.less = c.less
}

// Enqueue submits req. It returns one of:
//   - OutcomeDispatched and the grant: granted at once (no ticket);
//   - a rejected outcome and a *RejectedError: never queued;
//   - OutcomePending and a ticket: queued; the ticket's Done channel closes
//     when it is decided, and the caller must call Cancel if it stops waiting.
//
// A request is offered to the dispatcher at once unless it would overtake
// requests that compete for the same capacity: when its class already waits
// in its flow and band (FIFO within a class), or when the dispatcher said
// nothing is free and no capacity appeared since. Every other waiting
// request was already offered the current free capacity and could not use
// it, so trying the new one first keeps both priority and fairness. A
// request not tried for its class is rejected (no deadline) with the number
// of its class's requests ahead of it (RejectedError.QueuedAhead).
func (c *Core[R, G]) Enqueue(req Request[R]) (Outcome, G, *Ticket[R, G], error) {
	var zero G
	c.mu.Lock()
	c.stats.Enqueued++
	if req.Flow == "" {
		err := c.rejectLocked(OutcomeRejectedOther, "", fmt.Errorf("%w: empty flow", ErrInvalidRequest))
		c.unlock()
		return OutcomeRejectedOther, zero, nil, err
	}
	if c.shutdown {
		err := c.rejectLocked(OutcomeRejectedOther, "", ErrShutdown)
		c.unlock()
		return OutcomeRejectedOther, zero, nil, err
	}
	var now time.Time
	var fq *flowQueue[R, G]
	var cq *classQueue[R, G]
	var key string
	keyed := false
	try := true
	if c.stats.Waiting > 0 {
		now = c.clock.Now()
		if c.dueLocked(now) {
			// The timer is late (or about to fire): settle what is due first
			// so the newcomer cannot take capacity a waiter is owed.
			c.advanceLocked(now)
		}
		if b := c.bands[req.Priority]; b != nil {
			fq = b.flows[req.Flow]
		}
		if fq != nil {
			key, keyed = c.classOf(req.Payload), true
			cq = fq.class(key)
		}
		try = cq == nil && !c.exhausted
	}
	if try {
		g, v, err := c.d.TryDispatch(req.Flow, req.Payload)
		if err != nil {
			err = c.rejectLocked(OutcomeRejectedOther, "", fmt.Errorf("dispatching: %w", err))
			c.unlock()
			return OutcomeRejectedOther, zero, nil, err
		}
		c.exhausted = v == Exhausted
		if v == Granted {
			if c.remember {
				// An immediate grant is a turn: the flow goes behind those
				// served less recently when it next waits.
				c.turn++
				c.idle.set(req.Flow, c.turn)
			}
			c.stats.Dispatched++
			c.metrics.FlowControlWait(0, labelDispatched)
			c.metrics.FlowControlOutcome(labelDispatched)
			if c.stats.Waiting > 0 {
				// The new grant may expire before what NextChange said earlier.
				c.afterChangeLocked(now)
			}
			c.unlock()
			return OutcomeDispatched, g, nil, nil
		}
	}
	if now.IsZero() {
		now = c.clock.Now()
	}
	// A request that may not wait (its deadline is now: a request without
	// a wait) is never queued, so the queue limits are not its answer.
	if !req.Deadline.IsZero() && !now.Before(req.Deadline) {
		err := c.rejectLocked(OutcomeRejectedOther, "", ErrDeadline)
		if cq != nil {
			err.QueuedAhead = cq.n
		}
		c.unlock()
		return OutcomeRejectedOther, zero, nil, err
	}
	if err := c.checkLimitsLocked(req, fq); err != nil {
		c.unlock()
		return OutcomeRejectedCapacity, zero, nil, err
	}
	if !keyed {
		key = c.classOf(req.Payload)
	}
	t := c.queueLocked(req, now, fq, key)
	c.afterChangeLocked(now)
	c.unlock()
	return OutcomePending, zero, t, nil
}

// ownerOf is who req counts against for MaxQueuedPerOwner.
func ownerOf[R any](req Request[R]) string {
	if req.Owner != "" {
		return req.Owner
	}
	return req.Flow
}

// classOf is the class of payload ("" without a Classifier).
func (c *Core[R, G]) classOf(payload R) string {
	if c.classify == nil {
		return ""
	}
	return c.classify(payload)
}

func (c *Core[R, G]) checkLimitsLocked(req Request[R], fq *flowQueue[R, G]) *RejectedError {
	if m := c.opts.MaxQueuedPerFlow; m > 0 && fq != nil && fq.n >= m {
		return c.rejectLocked(OutcomeRejectedCapacity, LimitFlow, ErrQueueFull)
	}
	if m := c.opts.MaxQueuedPerOwner; m > 0 && c.owners[ownerOf(req)] >= m {
		return c.rejectLocked(OutcomeRejectedCapacity, LimitOwner, ErrQueueFull)
	}
	if m := c.opts.MaxQueuedPerBand; m > 0 {
		if b := c.bands[req.Priority]; b != nil && b.n >= m {
			return c.rejectLocked(OutcomeRejectedCapacity, LimitBand, ErrQueueFull)
		}
	}
	if m := c.opts.MaxQueued; m > 0 && c.stats.Waiting >= m {
		return c.rejectLocked(OutcomeRejectedCapacity, LimitGlobal, ErrQueueFull)
	}
	return nil
}

// joinTurnLocked is the turn of a flow that starts waiting in a band: the
// one it had when it last stopped waiting or was last served, if
// remembered; otherwise a never-served turn, ahead of every served flow.
func (c *Core[R, G]) joinTurnLocked(flow string) uint64 {
	if !c.remember {
		c.turn++
		return c.turn
	}
	if t, ok := c.idle.get(flow); ok {
		return t
	}
	c.joined++
	return c.joined
}

func (c *Core[R, G]) queueLocked(req Request[R], now time.Time, fq *flowQueue[R, G], key string) *Ticket[R, G] {
	b := c.bands[req.Priority]
	if b == nil {
		b = &band[R, G]{priority: req.Priority, flows: map[string]*flowQueue[R, G]{}}
		b.heap = flowHeap[R, G]{less: c.less, idx: persistentIdx[R, G]}
		c.bands[req.Priority] = b
		i, _ := slices.BinarySearchFunc(c.order, req.Priority, func(x *band[R, G], p int) int { return p - x.priority })
		c.order = slices.Insert(c.order, i, b)
	}
	if fq == nil {
		fq = &flowQueue[R, G]{name: req.Flow, owner: ownerOf(req), band: b, turn: c.joinTurnLocked(req.Flow), heapIdx: -1, tmpIdx: -1}
		c.ownerFlows[fq.owner] = append(c.ownerFlows[fq.owner], fq)
		if c.usesHeld() {
			fq.held = c.d.Held(req.Flow)
		}
		b.add(fq)
	}
	c.seq++
	t := &Ticket[R, G]{done: make(chan struct{}), req: req, enqueuedAt: now, seq: c.seq, heapIdx: -1, linked: true}
	fq.push(t, key)
	if fq.n == 1 {
		b.heap.push(fq)
	}
	if !req.Deadline.IsZero() {
		c.deadlines.push(t)
	}
	b.n++
	c.owners[ownerOf(req)]++
	c.stats.Waiting++
	c.metrics.FlowControlQueueLength(b.priority, b.n)
	if c.onQueue != nil {
		c.onQueue()
	}
	return t
}

// Cancel withdraws a queued request because its caller stops waiting; reason
// is OutcomeEvictedCancelled or OutcomeEvictedDeadline (anything else counts
// as cancelled). It returns the outcome to report to the caller: reason if
// the withdrawal won, including when the ticket had just been granted — the
// grant is then given back through Dispatcher.Release, never leaked — or the
// eviction that came first (deadline, shutdown, dispatcher error). Calling it
// again is harmless.
func (c *Core[R, G]) Cancel(t *Ticket[R, G], reason Outcome) Outcome {
	if reason != OutcomeEvictedDeadline {
		reason = OutcomeEvictedCancelled
	}
	if c.pauses != nil {
		c.pauses.beforeCancelCAS(t)
	}
	if t.cas(reason) {
		c.mu.Lock()
		if t.linked && reason == OutcomeEvictedDeadline {
			t.ahead = aheadInClass(t)
		}
		close(t.done)
		if t.linked {
			// A dispatch round may already have dropped it lazily.
			now := c.clock.Now()
			c.detachLocked(t)
			c.accountLocked(reason, now.Sub(t.enqueuedAt))
			c.freshRoundLocked(now)
			c.afterChangeLocked(now)
		}
		c.unlock()
		return reason
	}
	if t.state.CompareAndSwap(int32(OutcomeDispatched), int32(abandonedOffset+reason)) {
		// Granted just before the caller left: give it back.
		c.d.Release(t.grant)
		c.mu.Lock()
		c.stats.Abandoned++
		c.metrics.FlowControlAbandoned()
		c.unlock()
		return reason
	}
	return t.Outcome()
}

// OnCapacity is the capacity event: something may have become free (a
// release, an expiry, a proxy added or turning healthy, a cooldown lifted).
// The next holder of the mutex runs a full round: it evicts what is due and
// dispatches as many waiting requests as the dispatcher grants.
//
// It never blocks on the mutex, so it is safe to call from anywhere — in
// particular from the lease store's capacity hook, which may run inside a
// Dispatcher call this core is making with its mutex held. If the mutex is
// free the round runs here, before OnCapacity returns; otherwise the
// goroutine holding it runs the round before letting go (see unlock). Cheap
// when nothing waits; safe to call spuriously.
func (c *Core[R, G]) OnCapacity() {
	c.capacity.Store(true)
	if c.mu.TryLock() {
		c.unlock()
	}
}

// capacityLocked runs the round an OnCapacity asked for.
func (c *Core[R, G]) capacityLocked() {
	c.exhausted = false
	if c.shutdown || c.stats.Waiting == 0 {
		return
	}
	c.fullRoundLocked(c.clock.Now())
}

// Advance handles what is due at the clock's now: it evicts requests whose
// deadline passed and, when the dispatcher's NextChange is reached, runs a
// full dispatch round. Controller's timer calls it at NextWakeup.
func (c *Core[R, G]) Advance() {
	c.mu.Lock()
	if !c.shutdown {
		c.advanceLocked(c.clock.Now())
	}
	c.unlock()
}

// NextWakeup is when Advance must next be called: the earliest of the
// waiting deadlines and the dispatcher's NextChange (only while requests
// wait). Zero: nothing is scheduled.
func (c *Core[R, G]) NextWakeup() time.Time {
	c.mu.Lock()
	w := c.wakeAt
	c.unlock()
	return w
}

// Shutdown evicts every waiting request with OutcomeEvictedShutdown and
// rejects every later one. It returns how many it evicted.
func (c *Core[R, G]) Shutdown() int {
	c.mu.Lock()
	c.shutdown = true
	now := c.clock.Now()
	n := 0
	for len(c.order) > 0 {
		b := c.order[0]
		for len(b.active) > 0 {
			f := b.active[0]
			for f.n > 0 {
				t := f.head()
				if t.cas(OutcomeEvictedShutdown) {
					close(t.done)
				}
				c.detachLocked(t)
				c.accountLocked(t.Outcome(), now.Sub(t.enqueuedAt))
				n++
			}
		}
	}
	c.clearFreshLocked()
	c.nextChange = time.Time{}
	c.rearmLocked(now)
	c.unlock()
	return n
}

// Waiting counts the queued requests whose payload match accepts (match
// runs under the core's lock and must not call the core). A ProxyPool sizes
// itself from it: requests waiting for a proxy it could provide.
func (c *Core[R, G]) Waiting(match func(R) bool) int {
	c.mu.Lock()
	defer c.unlock()
	n := 0
	for _, b := range c.bands {
		for _, f := range b.flows {
			for _, q := range f.ready.items {
				for t := q.head; t != nil; t = t.next {
					if match(t.req.Payload) {
						n++
					}
				}
			}
		}
	}
	return n
}

// reject counts and returns a rejection decided outside Enqueue.
func (c *Core[R, G]) reject(o Outcome, cause error) *RejectedError {
	c.mu.Lock()
	c.stats.Enqueued++
	err := c.rejectLocked(o, "", cause)
	c.unlock()
	return err
}

func (c *Core[R, G]) rejectLocked(o Outcome, limit Limit, cause error) *RejectedError {
	c.stats.Rejected++
	label := o.String()
	c.metrics.FlowControlWait(0, label)
	c.metrics.FlowControlOutcome(label)
	e := &RejectedError{Outcome: o, Limit: limit, Cause: cause}
	if o == OutcomeRejectedCapacity {
		e.retryAfter = c.opts.RetryAfter
	}
	return e
}
