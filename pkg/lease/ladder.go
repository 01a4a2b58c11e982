package lease

import (
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// A ladder is a request's prioritized list of selectors, cheap first
// (docs/sites.md, "A ladder of proxy tiers"). A lease takes the first tier
// that has a proxy for it; it climbs past a tier only when that tier cannot
// serve the target at all — every proxy of it cools for the target (or the
// whole proxy cools, is unhealthy or draining) — never because it is busy:
// a request for a busy cheap tier waits for it rather than spend a costly
// proxy. Stepping back down needs nothing: once the cheap tier's cooldowns
// end, the next lease finds it open again.

// tiers is req's ladder: its Selectors, or its one Selector.
func (req *AcquireRequest) tiers() []map[string]string {
	if len(req.Selectors) > 0 {
		return req.Selectors
	}
	return []map[string]string{req.Selector}
}

// climbLocked is the proxy req gets now and the tier it is on; or nil
// with the tier the request stopped at (the counts of a no match are that
// tier's) and, when the site's budget for that tier refused it, why.
func (s *Store) climbLocked(req *AcquireRequest, site *sites.Budget, now time.Time) (*proxyEntry, int, *sites.Refusal) {
	tiers := req.tiers()
	for i, sel := range tiers {
		if site != nil {
			if r := site.AdmitTier(i); r != nil {
				return nil, i, r
			}
		}
		if e := s.selectLocked(req, sel, site, now); e != nil {
			return e, i, nil
		}
		if i == len(tiers)-1 || s.servesLocked(req, sel, now) {
			return nil, i, nil
		}
	}
	panic("unreachable: a ladder has at least one tier")
}

// servesLocked says whether some proxy req may use on selector sel could
// serve req's target, now or once it frees: healthy, not draining, cooling
// neither as a whole nor for the target.
func (s *Store) servesLocked(req *AcquireRequest, sel map[string]string, now time.Time) bool {
	serves := func(ns string) bool {
		for e := range s.candidatesLocked(ns, sel) {
			if e.info.Healthy && !e.info.Draining && !e.globalCooling && matches(e, sel) &&
				(req.Target == "" || !e.coolingFor(req.Target, now)) {
				return true
			}
		}
		return false
	}
	if req.Namespace != "" || req.Namespaces == nil {
		return serves(req.Namespace)
	}
	for _, ns := range req.Namespaces {
		if serves(ns) {
			return true
		}
	}
	return false
}
