package lease

import (
	"fmt"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// SetSitePolicies makes policies the sites' budgets every grant checks
// (docs/sites.md): a lease for a site a policy covers is granted only
// within that policy's budget, counted over every lease for its sites. A
// policy kept by name keeps its adapted limit; the live leases are counted
// again. It returns the policies left out or partly applied, and why.
func (s *Store) SetSitePolicies(policies []sites.Policy) map[string]string {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	t := sites.NewTable(policies)
	t.Carry(s.sites)
	s.sites = t
	for _, le := range s.leases {
		if le.site = t.For(le.Target); le.site != nil {
			le.site.Attach(le.Tier)
		}
	}
	// A new or raised budget may admit what waits.
	p.capacity = true
	s.unlockAndNotify(&p)
	return t.Conflicts
}

// SiteStatuses are the budgets' states now, in policy name order.
func (s *Store) SiteStatuses() []sites.Status {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	var out []sites.Status
	for _, b := range s.sites.Budgets() {
		out = append(out, b.Status(now))
	}
	s.unlockAndNotify(&p)
	return out
}

// reportSiteLocked cuts the budget of target's site on a rate_limited or
// banned report about a lease granted at acquiredAt (zero: unknown, which
// cuts nothing: the signal cannot be placed after the last cut).
func (s *Store) reportSiteLocked(result, target string, acquiredAt, now time.Time) {
	if result == ResultOK || acquiredAt.IsZero() {
		return
	}
	if b := s.sites.For(target); b != nil {
		b.Reported(acquiredAt, now)
	}
}

// SiteBusyError is TryAcquire's answer when the target's site budget
// refuses a lease now: a no match (IsNoMatch), for the site's class only.
type SiteBusyError struct{ Refusal sites.Refusal }

func (e *SiteBusyError) Error() string {
	return fmt.Sprintf("no proxy for this site now: %v", &e.Refusal)
}

// Is makes errors.Is(err, ErrNoMatch) true.
func (e *SiteBusyError) Is(target error) bool { return target == ErrNoMatch }
