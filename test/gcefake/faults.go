package gcefake

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// Fault changes the answer to matching calls. Zero-valued match fields match
// everything.
type Fault struct {
	// Op, Zone and Name select the calls (Op one of the Op constants).
	Op, Zone, Name string
	// Code and Reason make the call fail with that HTTP status and
	// errors[0].reason; Message defaults to a Compute-Engine-like text.
	Code    int
	Reason  string
	Message string
	// Delay holds the answer back (slowness); with Code 0 the call then
	// proceeds normally.
	Delay time.Duration
	// Vanish (inserts only) accepts the insert, then the instance is gone
	// after one poll: an operation that failed after it was accepted.
	Vanish bool
	// Times is how many calls it hits; 0 means until ClearFaults.
	Times int
}

func (f Fault) message() string {
	if f.Message != "" {
		return f.Message
	}
	switch f.Reason {
	case "quotaExceeded":
		return "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1."
	case "rateLimitExceeded":
		return "Rate Limit Exceeded"
	case "resourceNotReady":
		return fmt.Sprintf("The resource '%s' is not ready", f.Name)
	case "ZONE_RESOURCE_POOL_EXHAUSTED":
		return "The zone does not have enough resources available to fulfill the request. Try a different zone, or try again later."
	}
	return http.StatusText(f.Code)
}

type faultEntry struct {
	Fault
	hits int
}

func (f *faultEntry) matches(c Call) bool {
	return (f.Op == "" || f.Op == c.Op) && (f.Zone == "" || f.Zone == c.Zone) && (f.Name == "" || f.Name == c.Name)
}

// Inject adds a fault; the oldest matching fault applies first.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &faultEntry{Fault: f})
}

// ClearFaults removes every injected fault and random failure rate.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
	s.random = nil
}

// RandomFailures makes a fraction (0..1) of the calls of op ("" for every
// op) fail with code and reason, drawn from a generator seeded with seed so
// a run can be repeated.
func (s *Server) RandomFailures(op string, fraction float64, code int, reason string, seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.random = append(s.random, &randomFault{
		op: op, fraction: fraction, code: code, reason: reason,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	})
}

type randomFault struct {
	op       string
	fraction float64
	code     int
	reason   string
	rng      *rand.Rand
}

// takeFault returns the fault that applies to c, counting its hit.
func (s *Server) takeFault(c Call) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if !f.matches(c) {
			continue
		}
		f.hits++
		if f.Times > 0 && f.hits >= f.Times {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
		}
		out := f.Fault
		if out.Name == "" {
			out.Name = c.Name
		}
		return &out
	}
	for _, r := range s.random {
		if (r.op == "" || r.op == c.Op) && r.rng.Float64() < r.fraction {
			return &Fault{Code: r.code, Reason: r.reason, Name: c.Name}
		}
	}
	return nil
}
