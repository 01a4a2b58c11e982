package lease

import (
	"slices"
	"strings"
	"time"
)

// probe is a storeProbe made of funcs, either of which may be nil.
type probe struct {
	afterSelect func()
	onGrant     func(e *proxyEntry, req *AcquireRequest, tier int, now time.Time)
}

var _ storeProbe = (*probe)(nil)

func (p *probe) selected() {
	if p.afterSelect != nil {
		p.afterSelect()
	}
}

func (p *probe) granting(e *proxyEntry, req *AcquireRequest, tier int, now time.Time) {
	if p.onGrant != nil {
		p.onGrant(e, req, tier, now)
	}
}

// probeOf installs (once) and returns the store's probe.
func probeOf(s *Store) *probe {
	if p, ok := s.probe.(*probe); ok {
		return p
	}
	p := &probe{}
	s.probe = p
	return p
}

// State returns the store's durable state at now, sorted (leases and ended
// leases by ID, cooldowns by proxy namespace, name and target) so that equal
// stores give equal states. It also returns Changes at the same instant. Of
// the ended leases it keeps the newest MaxEndedInState.
func (s *Store) State() (State, uint64) {
	var st State
	changes := s.StateInto(&st)
	slices.SortFunc(st.Leases, func(a, b Lease) int { return strings.Compare(a.ID, b.ID) })
	return st, changes
}
