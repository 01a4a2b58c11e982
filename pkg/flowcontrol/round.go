package flowcontrol

import (
	"fmt"
	"slices"
	"time"
)

// The dispatch rounds: what runs under the core's mutex when capacity may
// have appeared, a request was removed or a deadline fell due, and the
// bookkeeping of a grant or an eviction.

// maxCombinedRounds bounds the capacity rounds one unlock runs for signals
// that keep arriving; a signal left over stays pending for the next holder
// of the mutex (or OnCapacity call). The lease store only signals observed
// changes, so in practice one or two rounds suffice.
const maxCombinedRounds = 64

// unlock releases the mutex. Before and after letting go it serves capacity
// signals that arrived while the mutex was held (OnCapacity could not take
// it), and after letting go it gives back the grants whose waiters left
// (Release may signal capacity again). Every path that takes the mutex
// releases it here, so no signal is lost: a signaller that fails TryLock set
// the flag before the holder's final check.
func (c *Core[R, G]) unlock() {
	for i := 1; ; i++ {
		if c.capacity.Load() && c.capacity.Swap(false) {
			c.capacityLocked()
		}
		if len(c.releases) == 0 {
			c.mu.Unlock()
		} else {
			rel := c.releases
			c.releases = nil
			c.mu.Unlock()
			for _, g := range rel {
				c.d.Release(g)
			}
		}
		if i == maxCombinedRounds || !c.capacity.Load() || !c.mu.TryLock() {
			return
		}
	}
}

func (c *Core[R, G]) dueLocked(now time.Time) bool {
	return !c.wakeAt.IsZero() && !now.Before(c.wakeAt)
}

func (c *Core[R, G]) advanceLocked(now time.Time) {
	if !c.nextChange.IsZero() && !now.Before(c.nextChange) {
		c.fullRoundLocked(now)
		return
	}
	c.evictDueLocked(now)
	c.freshRoundLocked(now)
	c.afterChangeLocked(now)
}

// fullRoundLocked offers the current capacity to every waiting flow, band by
// band, highest first, until the dispatcher is exhausted or every flow's
// head was granted or found unmatched.
func (c *Core[R, G]) fullRoundLocked(now time.Time) {
	c.stats.Rounds++
	c.exhausted = false
	c.evictDueLocked(now)
	c.syncHeldLocked()
	if c.policy.acrossBands() {
		flows := c.scratch[:0]
		for _, b := range c.order {
			c.refreshBandLocked(b)
			flows = append(flows, b.active...)
		}
		c.serveTemporaryLocked(now, flows)
		c.scratch = flows[:0]
	} else {
		for i := 0; i < len(c.order) && !c.exhausted; {
			b := c.order[i]
			c.refreshBandLocked(b)
			c.serveLocked(now, &b.heap, true)
			// Serving b may have emptied and removed it, and only it.
			if i < len(c.order) && c.order[i] == b {
				i++
			}
		}
	}
	c.clearFreshLocked()
	c.afterChangeLocked(now)
}

// refreshBandLocked re-reads Held for every flow of b when the cached
// values cannot be trusted: always, unless the dispatcher's owner reports
// Held changes (Options.HeldChangeNotifications) and none was lost.
func (c *Core[R, G]) refreshBandLocked(b *band[R, G]) {
	if !c.usesHeld() || (c.track && !b.stale) {
		return
	}
	for _, f := range b.active {
		f.held = c.d.Held(f.name)
	}
	b.heap.init()
	b.stale = false
}

func (c *Core[R, G]) usesHeld() bool { return c.policy.usesHeld() }

// syncHeldLocked applies the reported Held changes to the waiting flows.
func (c *Core[R, G]) syncHeldLocked() {
	if !c.track {
		return
	}
	c.dmu.Lock()
	dirty, all := c.dirty, c.dirtyAll
	c.dirty, c.dirtySpare = c.dirtySpare[:0], dirty
	c.dirtyAll = false
	c.dmu.Unlock()
	if all {
		for _, b := range c.order {
			b.stale = true
		}
	}
	for _, name := range dirty {
		for _, b := range c.order {
			if f := b.flows[name]; f != nil && !b.stale {
				f.held = c.d.Held(name)
				b.heap.fix(f)
			}
		}
		for _, f := range c.ownerFlows[name] {
			if f.name != name && !f.band.stale {
				f.held = c.d.Held(f.name)
				f.band.heap.fix(f)
			}
		}
	}
	clear(dirty)
}

// dropOwnerFlowLocked forgets f, which no longer waits, among its owner's.
func (c *Core[R, G]) dropOwnerFlowLocked(f *flowQueue[R, G]) {
	flows := c.ownerFlows[f.owner]
	if i := slices.Index(flows, f); i >= 0 {
		flows[i] = flows[len(flows)-1]
		flows[len(flows)-1] = nil
		flows = flows[:len(flows)-1]
	}
	if len(flows) == 0 {
		delete(c.ownerFlows, f.owner)
	} else {
		c.ownerFlows[f.owner] = flows
	}
}

// freshRoundLocked offers the current capacity to the flows whose head was
// exposed by a removal since the last round. Every other waiting head was
// already offered this capacity and could not use it, so this is what a
// full round would do, at the cost of the fresh flows only.
func (c *Core[R, G]) freshRoundLocked(now time.Time) {
	if len(c.fresh) == 0 {
		return
	}
	if c.exhausted {
		c.clearFreshLocked()
		return
	}
	flows := c.scratch[:0]
	for _, f := range c.fresh {
		if f.fresh && f.n > 0 {
			flows = append(flows, f)
		}
	}
	c.clearFreshLocked()
	c.syncHeldLocked()
	if c.usesHeld() {
		for _, f := range flows {
			if !c.track || f.band.stale {
				f.held = c.d.Held(f.name)
				f.band.heap.fix(f)
			}
		}
	}
	if c.policy.acrossBands() {
		c.serveTemporaryLocked(now, flows)
	} else {
		slices.SortStableFunc(flows, func(a, b *flowQueue[R, G]) int { return b.band.priority - a.band.priority })
		for i := 0; i < len(flows) && !c.exhausted; {
			j := i + 1
			for j < len(flows) && flows[j].band == flows[i].band {
				j++
			}
			c.serveTemporaryLocked(now, flows[i:j])
			i = j
		}
	}
	clear(flows)
	c.scratch = flows[:0]
	c.clearFreshLocked()
}

func (c *Core[R, G]) clearFreshLocked() {
	for _, f := range c.fresh {
		f.fresh = false
	}
	clear(c.fresh)
	c.fresh = c.fresh[:0]
}

// serveTemporaryLocked serves an ad hoc set of flows through the temporary heap.
func (c *Core[R, G]) serveTemporaryLocked(now time.Time, flows []*flowQueue[R, G]) {
	h := &c.tmp
	h.items = append(h.items[:0], flows...)
	h.init()
	c.serveLocked(now, h, false)
	for _, f := range h.items {
		f.tmpIdx = -1
	}
	clear(h.items)
	h.items = h.items[:0]
}

// serveLocked runs the policy over the flows in h until each is granted
// out, unmatched or emptied, or the dispatcher is exhausted. persistent: h
// is a band's own heap, whose unmatched flows are set aside for the round
// and put back at its end; otherwise h is the temporary heap, and the
// flows' places in their bands' heaps are kept up to date on the side.
func (c *Core[R, G]) serveLocked(now time.Time, h *flowHeap[R, G], persistent bool) {
	skipped := c.skipped[:0]
	parked := c.parked[:0]
	for len(h.items) > 0 && !c.exhausted {
		f := h.items[0]
		t := f.head()
		if t.state.Load() != int32(OutcomePending) {
			// Cancelled without the mutex; drop it on its caller's behalf.
			c.detachLocked(t)
			c.accountLocked(t.Outcome(), now.Sub(t.enqueuedAt))
			c.reposition(h, f, persistent, &skipped)
			continue
		}
		g, v, err := c.d.TryDispatch(f.name, t.req.Payload)
		if err != nil {
			t.err = fmt.Errorf("dispatching: %w", err)
			if t.cas(OutcomeEvictedOther) {
				close(t.done)
			}
			c.detachLocked(t)
			c.accountLocked(t.Outcome(), now.Sub(t.enqueuedAt))
			c.reposition(h, f, persistent, &skipped)
			continue
		}
		switch v {
		case NoMatch:
			// This head cannot use what is free: park its class for the
			// round, so the flow offers its next class; a flow with nothing
			// left to offer is skipped this round rather than block the
			// others.
			if len(f.parked) == 0 {
				parked = append(parked, f)
			}
			f.park(t.class)
			if len(f.ready.items) == 0 {
				h.remove(f)
				if persistent {
					skipped = append(skipped, f)
				}
			}
			continue
		case Exhausted:
			c.exhausted = true
			continue
		}
		// The new turn is set before the grant detaches the head, so a flow
		// left idle remembers this turn.
		f.held++
		c.turn++
		f.turn = c.turn
		c.grantLocked(t, g, now)
		c.reposition(h, f, persistent, &skipped)
	}
	for _, f := range parked {
		// Put back before the flow is in a heap again: its head is read
		// there. No heap key moves: the fair policy's is held and turn, the
		// FIFO policy's the oldest request, parked or not.
		f.unpark()
	}
	clear(parked)
	c.parked = parked[:0]
	for _, f := range skipped {
		if f.n > 0 {
			f.band.heap.push(f)
		}
	}
	clear(skipped)
	c.skipped = skipped[:0]
}

// reposition restores the heaps after f's head or key changed (detaching
// the head already removed an emptied flow from its band's heap).
// A flow whose remaining classes are all parked leaves h for the round (a
// persistent heap's flow is then set aside in skipped).
func (c *Core[R, G]) reposition(h *flowHeap[R, G], f *flowQueue[R, G], persistent bool, skipped *[]*flowQueue[R, G]) {
	if f.n > 0 && len(f.ready.items) == 0 {
		h.remove(f)
		if persistent {
			*skipped = append(*skipped, f)
		} else {
			f.band.heap.fix(f)
		}
		return
	}
	if persistent {
		h.fix(f)
		return
	}
	if f.n == 0 {
		h.remove(f)
		return
	}
	h.fix(f)
	f.band.heap.fix(f)
}

// grantLocked hands g to t, or, if t's caller left a moment ago, queues g to
// be given back once the mutex is released.
func (c *Core[R, G]) grantLocked(t *Ticket[R, G], g G, now time.Time) {
	t.grant = g
	if c.pauses != nil {
		c.pauses.afterGrantVerdict(t)
	}
	waited := now.Sub(t.enqueuedAt)
	if t.cas(OutcomeDispatched) {
		c.detachLocked(t)
		c.accountLocked(OutcomeDispatched, waited)
		close(t.done)
		return
	}
	var zero G
	t.grant = zero
	c.releases = append(c.releases, g)
	c.stats.Abandoned++
	c.metrics.FlowControlAbandoned()
	c.detachLocked(t)
	c.accountLocked(t.Outcome(), waited)
}

func (c *Core[R, G]) evictDueLocked(now time.Time) {
	for len(c.deadlines) > 0 {
		t := c.deadlines[0]
		if now.Before(t.req.Deadline) {
			return
		}
		t.ahead = aheadInClass(t)
		if t.cas(OutcomeEvictedDeadline) {
			close(t.done)
		}
		c.detachLocked(t)
		c.accountLocked(t.Outcome(), now.Sub(t.enqueuedAt))
	}
}

// detachLocked removes t from every structure. A head removal leaves the
// flow's next request untried: it is marked fresh.
func (c *Core[R, G]) detachLocked(t *Ticket[R, G]) {
	if !t.linked {
		return
	}
	t.linked = false
	f := t.flow
	b := f.band
	wasHead := f.remove(t)
	c.deadlines.remove(t)
	c.stats.Waiting--
	if o := ownerOf(t.req); c.owners[o] > 1 {
		c.owners[o]--
	} else {
		delete(c.owners, o)
	}
	b.n--
	c.metrics.FlowControlQueueLength(b.priority, b.n)
	switch {
	case f.n == 0:
		b.heap.remove(f)
		b.drop(f)
		c.dropOwnerFlowLocked(f)
		f.fresh = false
		if c.remember {
			c.idle.put(f.name, f.turn)
		}
	case wasHead:
		// The head is part of the FIFO policy's key.
		b.heap.fix(f)
		// A new class head was never offered the current capacity.
		if !f.fresh && !c.exhausted {
			f.fresh = true
			c.fresh = append(c.fresh, f)
		}
	}
	if b.n == 0 {
		delete(c.bands, b.priority)
		if i := slices.Index(c.order, b); i >= 0 {
			c.order = slices.Delete(c.order, i, i+1)
		}
	}
}

func (c *Core[R, G]) accountLocked(o Outcome, waited time.Duration) {
	switch {
	case o == OutcomeDispatched:
		c.stats.Dispatched++
	case o.IsEvicted():
		c.stats.Evicted++
	}
	label := o.String()
	c.metrics.FlowControlWait(waited, label)
	c.metrics.FlowControlOutcome(label)
}

// afterChangeLocked refreshes NextChange (only relevant while requests wait)
// and re-arms the wakeup.
func (c *Core[R, G]) afterChangeLocked(now time.Time) {
	c.nextChange = time.Time{}
	if c.stats.Waiting > 0 {
		if nc := c.d.NextChange(); nc.After(now) {
			c.nextChange = nc
		}
	}
	c.rearmLocked(now)
}

func (c *Core[R, G]) rearmLocked(now time.Time) {
	w := c.nextChange
	if len(c.deadlines) > 0 {
		if d := c.deadlines[0].req.Deadline; w.IsZero() || d.Before(w) {
			w = d
		}
	}
	if w.Equal(c.wakeAt) {
		return
	}
	c.wakeAt = w
	if c.onWake != nil {
		c.onWake(now, w)
	}
}

// aheadInClass counts the requests of t's class queued before it.
func aheadInClass[R, G any](t *Ticket[R, G]) int {
	n := 0
	for p := t.prev; p != nil; p = p.prev {
		n++
	}
	return n
}
