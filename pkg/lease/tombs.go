package lease

import "time"

// tombstone is an ended lease, remembered for reports and renewals until
// until (its end + CooldownWindow).
type tombstone struct {
	id string
	// name is the lease's namespace/name.
	name   ProxyKey
	proxy  ProxyKey
	target string
	holder string
	// reason is why the lease ended (Released, Expired, ProxyDeleted).
	reason Reason
	until  time.Time
	// acquiredAt is when the lease was granted (zero: loaded from a
	// checkpoint), for the site budget's cut on a late report.
	acquiredAt time.Time
	// gone: forgotten (the queues drop it when they reach it).
	gone bool
	// of is its holder's queue.
	of *holderTombs
}

// holderTombs are one holder's tombstones, oldest first: the queue
// Options.MaxEndedPerHolder evicts from.
type holderTombs struct {
	q    []*tombstone
	head int
	// live counts the tombstones of q that are not gone.
	live int
}

// rememberLocked keeps the ended lease t until t.until. When its holder
// then has more than MaxEndedPerHolder, the holder's oldest is forgotten, so
// that no holder's churn grows the store without bound nor shortens another
// holder's report window.
func (s *Store) rememberLocked(t *tombstone) {
	if old := s.tombs[t.id]; old != nil {
		s.forgetTombLocked(old)
	}
	s.tombs[t.id] = t
	if t.name.Name != t.id {
		s.tombNames[t.name] = t.id
	} else if s.tombNames[t.name] != "" {
		// A name reused after a named lease ended: the ID-named one is newer.
		delete(s.tombNames, t.name)
	}
	s.tombQ = append(s.tombQ, t)
	h := s.tombsOf[t.holder]
	if h == nil {
		h = &holderTombs{}
		s.tombsOf[t.holder] = h
	}
	t.of = h
	h.q = append(h.q, t)
	if h.live++; h.live <= s.opts.MaxEndedPerHolder {
		return
	}
	popGone(h)
	s.forgetTombLocked(h.q[h.head])
	popGone(h)
	// tombQ still holds it; compact once such outnumber the live.
	if s.tombGone > 1024 && s.tombGone > len(s.tombs) {
		s.compactTombQLocked()
	}
}

// forgetTombLocked drops t.
func (s *Store) forgetTombLocked(t *tombstone) {
	t.gone = true
	s.tombGone++
	delete(s.tombs, t.id)
	if s.tombNames[t.name] == t.id {
		delete(s.tombNames, t.name)
	}
	if t.of.live--; t.of.live == 0 {
		delete(s.tombsOf, t.holder) // every tombstone left in its q is gone
	}
}

// popGone drops the forgotten tombstones at the head of h's queue.
func popGone(h *holderTombs) {
	for h.head < len(h.q) && h.q[h.head].gone {
		h.q[h.head] = nil
		h.head++
	}
	h.q, h.head = compactHead(h.q, h.head, 64)
}

// expireTombsLocked forgets the ended leases whose report window is over
// at now.
func (s *Store) expireTombsLocked(now time.Time) {
	for s.tombHead < len(s.tombQ) && !s.tombQ[s.tombHead].until.After(now) {
		t := s.tombQ[s.tombHead]
		s.tombQ[s.tombHead] = nil
		s.tombHead++
		if !t.gone {
			s.forgetTombLocked(t)
			popGone(t.of)
		}
		s.tombGone--
	}
	s.tombQ, s.tombHead = compactHead(s.tombQ, s.tombHead, 256)
}

// compactHead moves q's elements from head to the front once more than
// least, and more than half of q, are behind head; it returns q and head
// after.
func compactHead[T any](q []T, head, least int) ([]T, int) {
	if head <= least || head*2 <= len(q) {
		return q, head
	}
	n := copy(q, q[head:])
	clear(q[n:])
	return q[:n], 0
}

// compactTombQLocked drops tombQ's forgotten tombstones.
func (s *Store) compactTombQLocked() {
	q := s.tombQ[:0]
	for _, t := range s.tombQ[s.tombHead:] {
		if !t.gone {
			q = append(q, t)
		}
	}
	clear(s.tombQ[len(q):])
	s.tombQ, s.tombHead, s.tombGone = q, 0, 0
}
