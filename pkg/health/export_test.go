package health

// Stats are cumulative counters of the engine, for the tests and benchmarks.
type Stats struct {
	// Probes finished and recorded; Failures among them.
	Probes, Failures uint64
	// Saturated counts ticks that found the queue full; the due proxies
	// left over are retried at the next tick.
	Saturated uint64
	// Missed counts probes dispatched a full interval or more after their
	// due time (an interval passed without a probe).
	Missed uint64
	// EventsSent and EventsDropped count transition events; a dropped event
	// is retried by the proxy's next probe.
	EventsSent, EventsDropped uint64
	// Tracked is the number of proxies with state.
	Tracked int
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	tracked := len(e.states)
	e.mu.Unlock()
	return Stats{
		Probes:        e.probes.Load(),
		Failures:      e.failures.Load(),
		Saturated:     e.saturated.Load(),
		Missed:        e.missed.Load(),
		EventsSent:    e.sent.Load(),
		EventsDropped: e.dropped.Load(),
		Tracked:       tracked,
	}
}
