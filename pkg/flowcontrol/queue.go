package flowcontrol

import (
	"container/heap"
	"slices"
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
	// ahead is how many requests of its class waited before it when it was
	// evicted for its deadline; written before the CAS (Cancel: before it
	// returns to the waiter).
	ahead int

	// Everything below is guarded by the core's mutex.
	req        Request[R]
	enqueuedAt time.Time
	seq        uint64
	flow       *flowQueue[R, G]
	class      *classQueue[R, G]
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
	return &EvictedError{Outcome: o, Cause: cause, QueuedAhead: t.ahead}
}

// Request returns the request the ticket was queued for.
func (t *Ticket[R, G]) Request() Request[R] { return t.req }

func (t *Ticket[R, G]) cas(to Outcome) bool {
	return t.state.CompareAndSwap(int32(OutcomePending), int32(to))
}

// classQueue is the FIFO of one class of one flow (an intrusive list):
// the flow's requests that compete for the same capacity (see Classifier).
type classQueue[R, G any] struct {
	key        string
	head, tail *Ticket[R, G]
	n          int
	// idx is the index in the flow's ready heap, -1 while parked.
	idx int
}

func (q *classQueue[R, G]) push(t *Ticket[R, G]) {
	t.class = q
	t.prev = q.tail
	t.next = nil
	if q.tail != nil {
		q.tail.next = t
	} else {
		q.head = t
	}
	q.tail = t
	q.n++
}

// remove unlinks t and reports whether it was the head.
func (q *classQueue[R, G]) remove(t *Ticket[R, G]) bool {
	wasHead := q.head == t
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		q.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		q.tail = t.prev
	}
	t.prev, t.next = nil, nil
	q.n--
	return wasHead
}

// flowQueue holds the waiting requests of one flow in one band, in one
// FIFO per class. The flow's head is the oldest head among its ready
// classes; a class whose head found nothing free is parked for the rest of
// the round, so the flow offers its next class instead (see the package
// documentation, "Classes").
type flowQueue[R, G any] struct {
	name string
	// owner is ownerOf the flow's first request: a HeldChanged(owner)
	// refreshes this flow's held too.
	owner string
	band  *band[R, G]
	// ready are the classes not parked, by head sequence; parked are the
	// classes whose head found nothing free in the current round (empty
	// between rounds).
	ready  classHeap[R, G]
	parked []*classQueue[R, G]
	// own is the storage of the flow's first class and readyBuf the first
	// backing of ready, so a flow of one class allocates nothing more.
	own      classQueue[R, G]
	ownInUse bool
	readyBuf [1]*classQueue[R, G]
	n        int
	// held is Dispatcher.Held(name), refreshed at the start of a round and
	// kept up to date by the round's own grants.
	held int
	// turn orders flows of equal held, lowest first: the flow's remembered
	// turn (or a never-served one) when it becomes active, the next value of
	// the served counter each time it is served (see turns.go).
	turn uint64
	// fresh: a class head has not been offered to the dispatcher since the
	// last full round (it was exposed by a removal), so a targeted round
	// must try the flow.
	fresh bool
	// heapIdx is the index in the band's heap (-1: out of it, e.g. skipped
	// for the current round); tmpIdx in a round's temporary heap.
	heapIdx, tmpIdx int
	activeIdx       int
}

// head is the request the flow offers next: the oldest head among its
// ready classes (nil when every class is parked).
func (f *flowQueue[R, G]) head() *Ticket[R, G] {
	if len(f.ready.items) == 0 {
		return nil
	}
	return f.ready.items[0].head
}

// oldest is the sequence of the flow's oldest request, parked or not (the
// key of the FIFO negative-control policy, which parking must not change).
func (f *flowQueue[R, G]) oldest() uint64 {
	seq := ^uint64(0)
	if t := f.head(); t != nil {
		seq = t.seq
	}
	for _, q := range f.parked {
		seq = min(seq, q.head.seq)
	}
	return seq
}

// class returns the ready class of key, nil if none waits. Linear: a flow
// has at most MaxQueuedPerFlow classes, and nearly always one.
func (f *flowQueue[R, G]) class(key string) *classQueue[R, G] {
	for _, q := range f.ready.items {
		if q.key == key {
			return q
		}
	}
	return nil
}

func (f *flowQueue[R, G]) push(t *Ticket[R, G], key string) {
	t.flow = f
	q := f.class(key)
	if q == nil {
		if !f.ownInUse {
			f.ownInUse = true
			q = &f.own
			*q = classQueue[R, G]{key: key}
		} else {
			q = &classQueue[R, G]{key: key}
		}
		q.push(t)
		if f.ready.items == nil {
			f.ready.items = f.readyBuf[:0]
		}
		f.ready.push(q)
	} else {
		q.push(t)
	}
	f.n++
}

// remove unlinks t and reports whether it exposed a new head of its class
// (one that was never offered the current capacity).
func (f *flowQueue[R, G]) remove(t *Ticket[R, G]) bool {
	q := t.class
	wasHead := q.remove(t)
	t.class = nil
	f.n--
	switch {
	case q.n == 0:
		if q.idx >= 0 {
			f.ready.remove(q)
		} else {
			f.unparkOne(q)
		}
		if q == &f.own {
			f.ownInUse = false
		}
		return false
	case wasHead && q.idx >= 0:
		f.ready.fix(q)
	}
	return wasHead
}

// park sets q aside for the rest of the round: its head found nothing free.
func (f *flowQueue[R, G]) park(q *classQueue[R, G]) {
	f.ready.remove(q)
	f.parked = append(f.parked, q)
}

// unparkOne drops an emptied parked class.
func (f *flowQueue[R, G]) unparkOne(q *classQueue[R, G]) {
	if i := slices.Index(f.parked, q); i >= 0 {
		f.parked = slices.Delete(f.parked, i, i+1)
	}
}

// unpark returns the parked classes to the ready heap (at the end of a round).
func (f *flowQueue[R, G]) unpark() {
	for _, q := range f.parked {
		f.ready.push(q)
	}
	clear(f.parked)
	f.parked = f.parked[:0]
}

// classHeap is an indexed min-heap of a flow's classes by head sequence.
// A flow has one class nearly always, so container/heap's interface calls
// cost nothing that matters here.
type classHeap[R, G any] struct{ items []*classQueue[R, G] }

var _ heap.Interface = (*classHeap[int, int])(nil)

func (h *classHeap[R, G]) Len() int           { return len(h.items) }
func (h *classHeap[R, G]) Less(i, j int) bool { return h.items[i].head.seq < h.items[j].head.seq }

func (h *classHeap[R, G]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].idx = i
	h.items[j].idx = j
}

// Push and Pop are container/heap's; use push, remove and fix.
func (h *classHeap[R, G]) Push(x any) {
	q := x.(*classQueue[R, G])
	q.idx = len(h.items)
	h.items = append(h.items, q)
}

func (h *classHeap[R, G]) Pop() any {
	last := len(h.items) - 1
	q := h.items[last]
	h.items[last] = nil
	h.items = h.items[:last]
	q.idx = -1
	return q
}

func (h *classHeap[R, G]) push(q *classQueue[R, G])   { heap.Push(h, q) }
func (h *classHeap[R, G]) remove(q *classQueue[R, G]) { heap.Remove(h, q.idx) }
func (h *classHeap[R, G]) fix(q *classQueue[R, G])    { heap.Fix(h, q.idx) }

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
