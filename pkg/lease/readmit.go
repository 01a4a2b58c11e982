package lease

import (
	"fmt"
	"time"
)

// Readmit takes back a lease lost in a crash: l is the lease as its signed
// ID proves it (pkg/leaseid: ID, Namespace, Holder, Flow, Target, Proxy
// namespace and name, AcquiredAt, ExpiresAt, TTL). Only a lease the restored
// state could not hold qualifies: granted after that state was taken
// (State.TakenAt) and before it was restored, and unknown to the store; it
// goes back onto its proxy as the proxy is now, with no Meta,
// and watchers see it Added (reason Readmitted).
//
// Answers: the live lease when the ID is live (already readmitted, or not
// lost at all); *EndedError when it ended since, expired (reason Expired)
// or its proxy is gone (ProxyDeleted); *NoRoomError when its proxy has been
// leased to capacity since; ErrUnknownLease for a lease outside the window
// (it was in the state, so it ended and was forgotten) or when nothing was
// restored.
func (s *Store) Readmit(l Lease) (*Lease, error) {
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	le, err := s.readmitLocked(&l, now, &p)
	var out *Lease
	if le != nil {
		c := le.Lease
		out = &c
	}
	s.unlockAndNotify(&p)
	return out, err
}

func (s *Store) readmitLocked(l *Lease, now time.Time, p *pending) (*leaseEntry, error) {
	if s.frozen {
		return nil, ErrFrozen
	}
	if le := s.leases[l.ID]; le != nil {
		return le, nil
	}
	if t, ok := s.tombs[l.ID]; ok && t.until.After(now) {
		return nil, &EndedError{Reason: t.reason}
	}
	if !s.inReadmitWindowLocked(l.AcquiredAt) {
		return nil, fmt.Errorf("readmitting lease %s: %w", l.ID, ErrUnknownLease)
	}
	if !l.ExpiresAt.After(now) {
		return nil, &EndedError{Reason: Expired}
	}
	e := s.proxies[l.Proxy.Key()]
	if e == nil || e.removed {
		return nil, &EndedError{Reason: ProxyDeleted}
	}
	if e.leases >= s.opts.MaxLeasesPerProxy {
		return nil, &NoRoomError{ID: l.ID, Proxy: e.key}
	}
	name := l.Name
	if name == "" {
		name = l.ID
	}
	nk := ProxyKey{Namespace: l.Namespace, Name: name}
	if _, taken := s.nameLocked(nk); taken {
		return nil, &AlreadyExistsError{Namespace: l.Namespace, Name: name}
	}
	s.revision++
	le := &leaseEntry{
		Lease: Lease{ID: l.ID, Namespace: l.Namespace, Name: name, Holder: l.Holder, Flow: l.Flow, Target: l.Target,
			Proxy: e.info, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt, TTL: l.TTL, Revision: s.revision},
		proxy:        e,
		expiresNanos: l.ExpiresAt.UnixNano(),
	}
	s.insertLocked(le, Readmitted, p)
	return le, nil
}

// ReportLost records a report on a lease lost in a crash without taking it
// back: l is the lease as its signed ID proves it. A report cannot tell a
// lease its holder still uses from one it released after the last
// checkpoint, so it brings back neither (a renew does, for a lease that was
// not released); it only starts the cooldown a report on an ended lease
// starts: result rate_limited or banned cools l's proxy for target (""
// = the lease's) until CooldownWindow from now. It qualifies as Readmit
// does (granted inside the window of leases the restored state could not
// hold), and only until CooldownWindow after the lease's own expiry (the
// latest it can have ended). A lease the store knows is reported on as by
// ReportAs. Errors: ErrInvalidResult, ErrFrozen, ErrUnknownLease, ErrNoTarget,
// *CooldownLimitError.
func (s *Store) ReportLost(l Lease, result, target string) error {
	if !ValidResult(result) {
		return fmt.Errorf("reporting %q on lease %s: %w", result, l.ID, ErrInvalidResult)
	}
	var p pending
	s.mu.Lock()
	now := s.now()
	s.advanceLocked(now, &p)
	known := s.leases[l.ID] != nil
	if t, ok := s.tombs[l.ID]; ok && t.until.After(now) {
		known = true
	}
	var err error
	switch {
	case known:
	case s.frozen:
		err = ErrFrozen
	case !s.inReadmitWindowLocked(l.AcquiredAt) || !l.ExpiresAt.Add(s.opts.CooldownWindow).After(now):
		err = fmt.Errorf("reporting on lease %s: %w", l.ID, ErrUnknownLease)
	default:
		if target == "" {
			target = l.Target
		}
		if result != ResultOK {
			e := s.entryLocked(l.Proxy.Key())
			if cerr := s.reportCoolLocked(e, l.Holder, target, now); cerr != nil {
				err = fmt.Errorf("reporting %q on lease %s: %w", result, l.ID, cerr)
			}
			s.forgetIfUnusedLocked(e)
		}
	}
	s.unlockAndNotify(&p)
	if known {
		return s.ReportAs(AnyHolder, l.ID, result, target)
	}
	return err
}

// inReadmitWindowLocked reports whether a lease granted at acquired may be
// one the restored state could not hold. Grant times are kept to the
// millisecond: a lease of the state's own millisecond that the state held
// is live or remembered, found before this is asked.
func (s *Store) inReadmitWindowLocked(acquired time.Time) bool {
	return !s.readmitFrom.IsZero() && !acquired.Before(s.readmitFrom.Truncate(time.Millisecond)) && !acquired.After(s.readmitUntil)
}

// lostStateSince is the readmit window's start when the durable state was
// lost rather than restored (an unreadable checkpoint): every lease granted
// before now may be one it held.
func lostStateSince() time.Time { return time.Unix(0, 0).UTC() }

// StateLost opens the readmit window when the durable state could not be
// restored (the checkpoint is corrupt): every lease granted up to now may
// have been in it, so Readmit and ReportLost take any lease its signed ID
// proves, as long as it has not expired (Readmit) or its report window has
// not passed (ReportLost). Call it, instead of Restore, before any API
// serves.
func (s *Store) StateLost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readmitFrom, s.readmitUntil = lostStateSince(), s.now()
}
