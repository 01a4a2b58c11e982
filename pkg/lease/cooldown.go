package lease

import "time"

// reportCoolLocked starts (or extends) the cooldown a rate_limited or banned
// report asks for: (e, target) for CooldownWindow from now, counted to
// holder, the holder of the lease reported on (not the caller: a report
// through the Kubernetes API comes as AnyHolder). The rules that keep one
// holder from acting on others:
//   - an empty target (a report that names none, on a lease for none) would
//     cool the proxy for every target of every tenant: ErrNoTarget;
//   - a holder's reports may run at most MaxCooldownsPerHolder cooldowns at
//     once, so reports cannot grow memory (or the checkpoint) without
//     bound: *CooldownLimitError. Extending a running cooldown is always
//     allowed; it stays counted to the holder that started it.
func (s *Store) reportCoolLocked(e *proxyEntry, holder, target string, now time.Time) error {
	if target == "" {
		return ErrNoTarget
	}
	until := now.Add(s.opts.CooldownWindow)
	// advanceLocked ran: a cooldown in the map is running.
	if _, running := e.cooldowns[target]; !running && s.cooledBy[holder] >= s.opts.MaxCooldownsPerHolder {
		return &CooldownLimitError{Holder: holder, Max: s.opts.MaxCooldownsPerHolder, Window: s.opts.CooldownWindow}
	}
	s.coolLocked(e, target, holder, until)
	return nil
}

// uncountCoolingLocked is a cooldown of holder's ending.
func (s *Store) uncountCoolingLocked(holder string) {
	if holder == "" {
		return
	}
	if n := s.cooledBy[holder] - 1; n > 0 {
		s.cooledBy[holder] = n
	} else {
		delete(s.cooledBy, holder)
	}
}

// CoolingAs is when the proxy of holder's live lease id stops cooling for
// target (a cooldown for every target counts too); the zero time when it
// does not. A lease is checked against its own target's cooldowns only when
// granted: whoever uses it for another target (the gateway, for a sticky
// session's next site) asks this first. Errors are GetAs's.
func (s *Store) CoolingAs(holder, id, target string) (time.Time, error) {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	defer s.unlockAndNotify(&p)
	le, err := s.liveAsLocked(holder, id, now)
	if err != nil {
		return time.Time{}, err
	}
	var until time.Time
	for _, t := range []string{target, ""} {
		if c, ok := le.proxy.cooldowns[t]; ok && c.until.After(now) && c.until.After(until) {
			until = c.until
		}
	}
	return until, nil
}
