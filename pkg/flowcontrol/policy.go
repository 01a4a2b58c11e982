package flowcontrol

// policy orders the flows of a band. fairPolicy is the only one production
// uses; the simulation's negative controls (FIFO across flows, a strict
// order, band-blind fairness, fairness that forgets turns) implement it in
// policy_test.go, so a broken order is shown to fail the same checks.
type policy[R, G any] interface {
	// less reports whether flow a is offered capacity before flow b. It is
	// called under the core's mutex, inside heap operations: it must be
	// cheap and must not call the dispatcher.
	less(a, b *flowQueue[R, G]) bool
	// usesHeld: less reads flowQueue.held, so a round refreshes it from
	// Dispatcher.Held.
	usesHeld() bool
	// remembersTurns: a flow keeps its turn across idle spells and a grant
	// made at once (the fast path) counts as a turn (see turns.go).
	remembersTurns() bool
	// acrossBands: a round orders the flows of every band as one, ignoring
	// priority (only a negative control does).
	acrossBands() bool
}

// fairPolicy: fewest held first, least recently served among equals, with
// strict priority between bands.
type fairPolicy[R, G any] struct{}

func (fairPolicy[R, G]) less(a, b *flowQueue[R, G]) bool {
	if a.held != b.held {
		return a.held < b.held
	}
	return a.turn < b.turn
}

func (fairPolicy[R, G]) usesHeld() bool       { return true }
func (fairPolicy[R, G]) remembersTurns() bool { return true }
func (fairPolicy[R, G]) acrossBands() bool    { return false }
