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
	// Grant times are kept to the millisecond: a lease of the state's own
	// millisecond that the state held is live or remembered, found above.
	if s.readmitFrom.IsZero() || l.AcquiredAt.Before(s.readmitFrom.Truncate(time.Millisecond)) || l.AcquiredAt.After(s.readmitUntil) {
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
	if _, taken := s.names[nk]; taken {
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
