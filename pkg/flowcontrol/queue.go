package flowcontrol

import (
	"sync/atomic"
	"time"
)

// abandonedOffset marks, in Ticket.state, a grant that was given back because
// its waiter left: state = abandonedOffset + the outcome reported to the waiter.
// A separate state (rather than leaving Dispatched) makes the give-back itself
// a compare-and-swap, so it happens once even if Cancel is called twice.
const abandonedOffset = 100

// Ticket is a queued request. Its state moves exactly once from
// OutcomePending to a final outcome by compare-and-swap: to Dispatched by the
// dispatch round, to an eviction by the round, the deadline timer or Cancel.
type Ticket[R, G any] struct {
	state atomic.Int32
	done  chan struct{}
	// grant is written before the CAS to Dispatched and read only after
	// observing it, so the atomic orders it.
	grant G
	// err is the dispatcher error of an OutcomeEvictedOther, written before the CAS.
	err error

	// Everything below is guarded by the core's mutex.
	req        Request[R]
	enqueuedAt time.Time
	seq        uint64
	flow       *flowQueue[R, G]
	prev, next *Ticket[R, G]
	heapIdx    int // index in the deadline heap, -1 when absent
	linked     bool
}

// Done is closed when the ticket reaches a final outcome.
func (t *Ticket[R, G]) Done() <-chan struct{} { return t.done }

// Outcome is OutcomePending while queued, then the final outcome. A grant
// abandoned by a waiter that left reports the outcome Cancel returned.
func (t *Ticket[R, G]) Outcome() Outcome {
	s := Outcome(t.state.Load())
	if s >= abandonedOffset {
		return s - abandonedOffset
	}
	return s
}

// Grant returns the grant once Outcome() is OutcomeDispatched.
func (t *Ticket[R, G]) Grant() (G, bool) {
	if Outcome(t.state.Load()) == OutcomeDispatched {
		return t.grant, true
	}
	var zero G
	return zero, false
}

// Err returns the error matching a final non-dispatched outcome, nil otherwise.
func (t *Ticket[R, G]) Err() error {
	o := t.Outcome()
	if !o.IsEvicted() {
		return nil
	}
	cause := t.err
	if o != OutcomeEvictedOther || cause == nil {
		cause = evictionCause(o)
	}
	return &EvictedError{Outcome: o, Cause: cause}
}

// Request returns the request the ticket was queued for.
func (t *Ticket[R, G]) Request() Request[R] { return t.req }

func (t *Ticket[R, G]) cas(to Outcome) bool {
	return t.state.CompareAndSwap(int32(OutcomePending), int32(to))
}

// flowQueue is the FIFO of one flow in one band (an intrusive list).
type flowQueue[R, G any] struct {
	name       string
	band       *band[R, G]
	head, tail *Ticket[R, G]
	n          int
	// held is Dispatcher.Held(name), refreshed at the start of a round and
	// kept up to date by the round's own grants.
	held int
	// turn orders flows of equal held, lowest first: the flow's remembered
	// turn (or a never-served one) when it becomes active, the next value of
	// the served counter each time it is served (see turns.go).
	turn uint64
	// fresh: the head has not been offered to the dispatcher since the last
	// full round (it was exposed by a removal), so a targeted round must try it.
	fresh bool
	// heapIdx is the index in the band's heap (-1: out of it, e.g. skipped
	// for the current round); tmpIdx in a round's temporary heap.
	heapIdx, tmpIdx int
	activeIdx       int
}

func (f *flowQueue[R, G]) push(t *Ticket[R, G]) {
	t.flow = f
	t.prev = f.tail
	t.next = nil
	if f.tail != nil {
		f.tail.next = t
	} else {
		f.head = t
	}
	f.tail = t
	f.n++
}

// remove unlinks t and reports whether it was the head.
func (f *flowQueue[R, G]) remove(t *Ticket[R, G]) bool {
	wasHead := f.head == t
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		f.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		f.tail = t.prev
	}
	t.prev, t.next = nil, nil
	f.n--
	return wasHead
}

// band holds the flows of one priority: by name for lookup, in a slice for
// refreshing them all (iterating a slice is several times cheaper than a
// map), and in a heap in policy order.
type band[R, G any] struct {
	priority int
	flows    map[string]*flowQueue[R, G]
	active   []*flowQueue[R, G]
	heap     flowHeap[R, G]
	n        int
	// stale: the cached Held of this band's flows may be wrong (a lost
	// change report); the next full round re-reads them all.
	stale bool
}

func (b *band[R, G]) add(f *flowQueue[R, G]) {
	b.flows[f.name] = f
	f.activeIdx = len(b.active)
	b.active = append(b.active, f)
}

func (b *band[R, G]) drop(f *flowQueue[R, G]) {
	delete(b.flows, f.name)
	last := len(b.active) - 1
	moved := b.active[last]
	b.active[f.activeIdx] = moved
	moved.activeIdx = f.activeIdx
	b.active[last] = nil
	b.active = b.active[:last]
}

// deadlineHeap is a min-heap of tickets by deadline (then sequence, so the
// order is deterministic).
type deadlineHeap[R, G any] []*Ticket[R, G]

func (h deadlineHeap[R, G]) less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.req.Deadline.Equal(b.req.Deadline) {
		return a.req.Deadline.Before(b.req.Deadline)
	}
	return a.seq < b.seq
}

func (h deadlineHeap[R, G]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *deadlineHeap[R, G]) push(t *Ticket[R, G]) {
	t.heapIdx = len(*h)
	*h = append(*h, t)
	h.up(t.heapIdx)
}

func (h *deadlineHeap[R, G]) remove(t *Ticket[R, G]) {
	i := t.heapIdx
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	t.heapIdx = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h deadlineHeap[R, G]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlineHeap[R, G]) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.swap(i, m)
		i = m
	}
}

// flowHeap is an indexed min-heap of flows under the core's policy. Each
// band keeps a persistent one (index flowQueue.heapIdx); rounds over an ad
// hoc set of flows use a temporary one (index flowQueue.tmpIdx).
type flowHeap[R, G any] struct {
	items []*flowQueue[R, G]
	less  func(a, b *flowQueue[R, G]) bool
	idx   func(f *flowQueue[R, G]) *int
}

func (h *flowHeap[R, G]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.idx(h.items[i]) = i
	*h.idx(h.items[j]) = j
}

// init heapifies items.
func (h *flowHeap[R, G]) init() {
	for i, f := range h.items {
		*h.idx(f) = i
	}
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *flowHeap[R, G]) push(f *flowQueue[R, G]) {
	*h.idx(f) = len(h.items)
	h.items = append(h.items, f)
	h.up(len(h.items) - 1)
}

// remove takes f out of the heap; a no-op if it is not in it.
func (h *flowHeap[R, G]) remove(f *flowQueue[R, G]) {
	i := *h.idx(f)
	if i < 0 {
		return
	}
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	*h.idx(f) = -1
	if i != last {
		h.fixAt(i)
	}
}

// fix restores the order after f's key changed; a no-op if f is not in it.
func (h *flowHeap[R, G]) fix(f *flowQueue[R, G]) {
	if i := *h.idx(f); i >= 0 {
		h.fixAt(i)
	}
}

func (h *flowHeap[R, G]) fixAt(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *flowHeap[R, G]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down reports whether the item at i moved.
func (h *flowHeap[R, G]) down(i int) bool {
	start := i
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			m = r
		}
		if !h.less(h.items[m], h.items[i]) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}

func persistentIdx[R, G any](f *flowQueue[R, G]) *int { return &f.heapIdx }
func temporaryIdx[R, G any](f *flowQueue[R, G]) *int  { return &f.tmpIdx }
