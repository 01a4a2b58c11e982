package flowcontrol

import (
	"time"
)

// Dispatcher is the capacity the controller hands out: the lease store behind
// an adapter (see the package documentation for what an adapter must do).
//
// R is the request payload (what to acquire), G the grant (what was
// acquired). Both are type parameters rather than `any` so that the adapter
// and the callers of EnqueueAndWait work with their own types without
// assertions, and so that a struct payload is not boxed (one allocation per
// request) on its way through the queue.
//
// Lock order: the controller calls TryDispatch, Held and NextChange while it
// holds its own mutex, so these must not block on anything that waits for the
// controller, and must never call back into it. Release is called without the
// controller's mutex held.
type Dispatcher[R, G any] interface {
	// TryDispatch tries to grant payload to flow now, without waiting. A
	// Granted verdict transfers ownership of the grant to the controller,
	// which hands it to the waiter or gives it back through Release; the
	// grant must count towards Held(flow) from this moment. NoMatch means
	// nothing free fits this request (other requests may still fit);
	// Exhausted means nothing is free at all, so no request can be granted
	// until capacity appears (an optional hint that ends a dispatch round
	// early — NoMatch is always a correct answer). A non-nil error means the
	// request can never be granted as it stands (bad selector, unknown
	// namespace): the request is rejected or evicted with an Other outcome.
	TryDispatch(flow string, payload R) (grant G, verdict Verdict, err error)
	// Held returns how many grants flow holds now (live leases whose fairness
	// flow is flow), including grants made without the controller.
	Held(flow string) int
	// Release gives back a grant whose waiter left before it could take it.
	// It is called at most once per grant and never with the controller's
	// mutex held, so it may trigger OnCapacity synchronously.
	Release(grant G)
	// NextChange returns the earliest future instant at which capacity may
	// appear by itself (a lease expiring, a cooldown ending), or the zero
	// time if none is known. Instants not after the clock's now are ignored.
	NextChange() time.Time
}

// Classifier is implemented by a Dispatcher whose requests differ in the
// capacity they can use (the lease store: a target some proxies cool for, a
// selector). The controller keeps one FIFO per class within a flow: a class
// whose head finds nothing free does not hold back the flow's other classes.
// Without it every request of a flow is of one class (FIFO within a flow).
type Classifier[R any] interface {
	// Class returns the key of payload's class: two requests of a flow
	// compete for the same capacity exactly when their keys are equal, so
	// whenever one of them finds nothing free, so would the other. Called
	// under the controller's mutex: pure and cheap, and the controller
	// calls it only for requests whose flow already waits or that queue.
	Class(payload R) string
}

// Verdict is the answer of Dispatcher.TryDispatch.
type Verdict uint8

const (
	// NoMatch: nothing free fits this request; others may still fit. The
	// zero value, so an adapter that forgets to set the verdict is safe.
	NoMatch Verdict = iota
	// Granted: the grant is valid and held by the flow.
	Granted
	// Exhausted: nothing is free for any request; the round stops.
	Exhausted
)

// Request is one request for capacity.
type Request[R any] struct {
	// Flow is the fairness key (the authenticated user, the HTTP token
	// identity or an explicit flow name). It must not be empty.
	Flow string
	// Priority selects the band. Higher values are served first, as with
	// Kubernetes PriorityClass values; between bands priority is strict.
	Priority int
	// Owner is who the request counts against for MaxQueuedPerOwner: the
	// identity behind its flow, whatever flow and band it picks ("" = its
	// Flow).
	Owner string
	// Payload is handed to Dispatcher.TryDispatch unchanged.
	Payload R
	// Deadline is the last instant (exclusive) at which the request may be
	// granted; at or after it a queued request is evicted with
	// OutcomeEvictedDeadline. Zero: no deadline (wait until cancelled). A
	// request that cannot be granted at once and whose deadline has already
	// passed is rejected (OutcomeRejectedOther, ErrDeadline) and never queued.
	Deadline time.Time
}

// Outcome is the fate of a request.
type Outcome int32

// Outcomes. Rejected outcomes mean the request was never queued; evicted
// outcomes mean it was queued and left without a grant.
const (
	// OutcomePending: queued, not decided yet (never returned by EnqueueAndWait).
	OutcomePending Outcome = iota
	// OutcomeDispatched: the request holds a grant.
	OutcomeDispatched
	// OutcomeRejectedCapacity: a queue limit (flow, owner, band or global) was
	// reached.
	OutcomeRejectedCapacity
	// OutcomeRejectedOther: shut down, invalid request, deadline already
	// passed, caller already gone, or the dispatcher failed on the fast path.
	OutcomeRejectedOther
	// OutcomeEvictedDeadline: Request.Deadline (or the caller's context
	// deadline) passed while queued.
	OutcomeEvictedDeadline
	// OutcomeEvictedCancelled: the caller cancelled while queued.
	OutcomeEvictedCancelled
	// OutcomeEvictedShutdown: the controller shut down while queued.
	OutcomeEvictedShutdown
	// OutcomeEvictedOther: the dispatcher failed for the queued request.
	OutcomeEvictedOther
	numOutcomes
)

// Outcomes returns every outcome a request can end with (all but OutcomePending).
func Outcomes() []Outcome {
	out := make([]Outcome, 0, numOutcomes-1)
	for o := OutcomeDispatched; o < numOutcomes; o++ {
		out = append(out, o)
	}
	return out
}

// String returns the metric label of o.
func (o Outcome) String() string {
	switch o {
	case OutcomePending:
		return "pending"
	case OutcomeDispatched:
		return labelDispatched
	case OutcomeRejectedCapacity:
		return "rejected_capacity"
	case OutcomeRejectedOther:
		return "rejected_other"
	case OutcomeEvictedDeadline:
		return "evicted_deadline"
	case OutcomeEvictedCancelled:
		return "evicted_cancelled"
	case OutcomeEvictedShutdown:
		return "evicted_shutdown"
	case OutcomeEvictedOther:
		return "evicted_other"
	}
	return "unknown"
}

// labelDispatched is OutcomeDispatched.String(), spelled out for the fast path.
const labelDispatched = "dispatched"

// IsRejected reports whether o is a rejection (never queued).
func (o Outcome) IsRejected() bool {
	return o == OutcomeRejectedCapacity || o == OutcomeRejectedOther
}

// IsEvicted reports whether o is an eviction (queued, left without a grant).
func (o Outcome) IsEvicted() bool {
	return o >= OutcomeEvictedDeadline && o < numOutcomes
}

// Metrics receives observations from the controller. Method names carry the
// FlowControl prefix so one metrics type can satisfy this and other packages'
// recorder interfaces structurally. Methods are called with the controller's
// mutex held: they must be cheap and must not block. flowcontrolmetrics
// provides the Prometheus implementation.
type Metrics interface {
	// FlowControlQueueLength reports the number of waiting requests of a band
	// after it changed.
	FlowControlQueueLength(band int, n int)
	// FlowControlWait records how long a request waited (zero when granted or
	// rejected at once) and its outcome (Outcome.String()).
	FlowControlWait(d time.Duration, outcome string)
	// FlowControlOutcome counts one finished request by outcome.
	FlowControlOutcome(outcome string)
	// FlowControlAbandoned counts one grant given back through
	// Dispatcher.Release because its waiter had already left.
	FlowControlAbandoned()
}

// NopMetrics discards every observation.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

func (NopMetrics) FlowControlQueueLength(int, int)       {}
func (NopMetrics) FlowControlWait(time.Duration, string) {}
func (NopMetrics) FlowControlOutcome(string)             {}
func (NopMetrics) FlowControlAbandoned()                 {}

// Options configure a Core or Controller. Zero limits mean unlimited; the
// wiring is expected to set all three.
type Options struct {
	// MaxQueuedPerFlow caps the waiting requests of one flow in one band.
	MaxQueuedPerFlow int
	// MaxQueuedPerBand caps the waiting requests of each band.
	MaxQueuedPerBand int
	// MaxQueued caps all waiting requests.
	MaxQueued int
	// MaxQueuedPerOwner caps the waiting requests of one owner
	// (Request.Owner) over all its flows and bands: an identity that splits
	// its requests over many flows or bands still cannot fill MaxQueued.
	MaxQueuedPerOwner int
	// RetryAfter is the hint carried by capacity rejections (HTTP Retry-After).
	// Default DefaultRetryAfter.
	RetryAfter time.Duration
	// Metrics receives observations; nil discards them.
	Metrics Metrics
	// HeldChangeNotifications: the dispatcher's owner calls HeldChanged(flow)
	// after every change of Held(flow) (lease acquired, released, expired),
	// so rounds trust cached values and read Held only for the flows
	// reported. Without it every round re-reads Held for every waiting flow
	// of the bands it visits. A missed report skews fairness until the flow's
	// next report; it never strands capacity.
	HeldChangeNotifications bool
}

// DefaultRetryAfter is the default Options.RetryAfter.
const DefaultRetryAfter = time.Second

// Stats are counters kept by the core. At every moment its mutex is free:
// Enqueued == Dispatched + Rejected + Evicted + Waiting.
type Stats struct {
	// Enqueued counts every request submitted, including rejected ones.
	Enqueued uint64
	// Dispatched counts requests that got a grant (at once or after waiting),
	// including grants later abandoned by a caller that left.
	Dispatched uint64
	// Rejected counts requests refused without queueing.
	Rejected uint64
	// Evicted counts queued requests that left without a grant.
	Evicted uint64
	// Waiting is the number of queued requests now.
	Waiting int
	// Abandoned counts grants given back through Dispatcher.Release because
	// the waiter had left (before or after the grant was recorded).
	Abandoned uint64
	// Rounds counts full dispatch rounds (capacity events and due timers).
	Rounds uint64
}
