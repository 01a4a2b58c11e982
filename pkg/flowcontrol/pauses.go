package flowcontrol

// pauser stops the core at the points where a race between a grant, a
// cancel and the timer is decided, so that the race tests can hold each
// order open (export_test.go implements it). Production sets none.
type pauser[R, G any] interface {
	// afterGrantVerdict runs in a dispatch round after TryDispatch granted
	// t's request and before the CAS that gives t the grant (mutex held).
	afterGrantVerdict(t *Ticket[R, G])
	// beforeCancelCAS runs in Cancel before its CAS (mutex not held).
	beforeCancelCAS(t *Ticket[R, G])
	// beforeTimerAdvance runs in the timer goroutine before it takes the
	// mutex.
	beforeTimerAdvance()
}
