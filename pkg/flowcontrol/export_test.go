package flowcontrol

// testPauses are the race tests' pause points: each func, when set, runs
// at its point (see pauser).
type testPauses[R, G any] struct {
	afterGrant   func(t *Ticket[R, G])
	beforeCancel func(t *Ticket[R, G])
	beforeTimer  func()
}

func (p *testPauses[R, G]) afterGrantVerdict(t *Ticket[R, G]) {
	if p.afterGrant != nil {
		p.afterGrant(t)
	}
}

func (p *testPauses[R, G]) beforeCancelCAS(t *Ticket[R, G]) {
	if p.beforeCancel != nil {
		p.beforeCancel(t)
	}
}

func (p *testPauses[R, G]) beforeTimerAdvance() {
	if p.beforeTimer != nil {
		p.beforeTimer()
	}
}

// pausesFor installs pause points on c (before it serves a request) and
// returns them for the test to set.
func pausesFor[R, G any](c *Core[R, G]) *testPauses[R, G] {
	p := &testPauses[R, G]{}
	c.pauses = p
	return p
}

// Stats returns a snapshot of the counters.
func (c *Core[R, G]) Stats() Stats {
	c.mu.Lock()
	st := c.stats
	c.unlock()
	return st
}

// Stats returns a snapshot of the core's counters.
func (c *Controller[R, G]) Stats() Stats { return c.core.Stats() }
