package lease

import "time"

// probe is a storeProbe made of funcs, either of which may be nil.
type probe struct {
	afterSelect func()
	onGrant     func(e *proxyEntry, req *AcquireRequest, now time.Time)
}

var _ storeProbe = (*probe)(nil)

func (p *probe) selected() {
	if p.afterSelect != nil {
		p.afterSelect()
	}
}

func (p *probe) granting(e *proxyEntry, req *AcquireRequest, now time.Time) {
	if p.onGrant != nil {
		p.onGrant(e, req, now)
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
