package checkpoint

import (
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// cooldownKey names one cooling (proxy, target) pair.
type cooldownKey struct {
	proxy  lease.ProxyKey
	target string
}

func keyOf(c lease.Cooldown) cooldownKey { return cooldownKey{c.Proxy, c.Target} }

func untilOf(c lease.Cooldown) storedUntil { return storedUntil{unixNano(c.Until), c.Holder} }

// delta is what changed between the stored state and the store's: puts are
// leases, cooldowns and ended leases new or changed (with the store's
// revision and time), the rest those gone. A journal segment holds one.
type delta struct {
	puts             lease.State
	deletedLeases    []string
	deletedCooldowns []cooldownKey
	deletedEnded     []string
}

func (d *delta) reset() {
	d.puts.Leases, d.puts.Cooldowns, d.puts.Ended = d.puts.Leases[:0], d.puts.Cooldowns[:0], d.puts.Ended[:0]
	d.deletedLeases, d.deletedCooldowns, d.deletedEnded = d.deletedLeases[:0], d.deletedCooldowns[:0], d.deletedEnded[:0]
}

// changes is how many leases, cooldowns and ended leases d writes.
func (d *delta) changes() int {
	return len(d.puts.Leases) + len(d.puts.Cooldowns) + len(d.puts.Ended) + len(d.deletedLeases) + len(d.deletedCooldowns) + len(d.deletedEnded)
}

// baseline is what the stored checkpoint holds (the snapshot and the
// journal after it), as much as telling a change needs: each lease's
// revision, each cooldown's end and holder, each ended lease. A lease's
// revision moves with every change the API shows of it, so an equal
// revision is an equal lease.
type baseline struct {
	revision  uint64
	leases    map[string]*seen[uint64]
	cooldowns map[cooldownKey]*seen[storedUntil]
	ended     map[string]*seen[int64]
	// pass marks what the current diff found in the store; what it did not
	// find is gone.
	pass uint32
}

// seen is a baseline entry: its value and the last diff that found it.
type seen[T comparable] struct {
	v    T
	pass uint32
}

type storedUntil struct {
	until  int64
	holder string
}

// reset makes st the baseline (a snapshot written or a checkpoint loaded),
// reusing the entries of what it held: a snapshot of 100,000 leases
// allocates nothing for what was there before.
func (b *baseline) reset(st *lease.State) {
	if b.leases == nil {
		b.leases = make(map[string]*seen[uint64], len(st.Leases))
		b.cooldowns = make(map[cooldownKey]*seen[storedUntil], len(st.Cooldowns))
		b.ended = make(map[string]*seen[int64], len(st.Ended))
	}
	b.revision = st.Revision
	b.pass++
	for i := range st.Leases {
		mark(b.leases, st.Leases[i].ID, st.Leases[i].Revision, b.pass)
	}
	for _, c := range st.Cooldowns {
		mark(b.cooldowns, keyOf(c), untilOf(c), b.pass)
	}
	for _, e := range st.Ended {
		mark(b.ended, e.ID, unixNano(e.Until), b.pass)
	}
	sweep(b.leases, b.pass)
	sweep(b.cooldowns, b.pass)
	sweep(b.ended, b.pass)
}

// mark sets k's value to v, found in pass.
func mark[K comparable, T comparable](m map[K]*seen[T], k K, v T, pass uint32) {
	if e := m[k]; e != nil {
		e.v, e.pass = v, pass
		return
	}
	m[k] = &seen[T]{v: v, pass: pass}
}

// sweep deletes what pass did not find.
func sweep[K comparable, T comparable](m map[K]*seen[T], pass uint32) {
	for k, e := range m {
		if e.pass != pass {
			delete(m, k)
		}
	}
}

// diff fills d with what st (taken at now: the store's clock) changes of
// the baseline. Cooldowns and ended leases over by now are dropped from the
// baseline without a word: a load drops them too.
func (b *baseline) diff(st *lease.State, now time.Time, d *delta) {
	d.reset()
	b.pass++
	d.puts.Revision, d.puts.TakenAt = st.Revision, st.TakenAt
	for i := range st.Leases {
		l := &st.Leases[i]
		if e := b.leases[l.ID]; e != nil {
			e.pass = b.pass
			if e.v == l.Revision {
				continue
			}
		}
		d.puts.Leases = append(d.puts.Leases, *l)
	}
	for _, c := range st.Cooldowns {
		v := untilOf(c)
		if e := b.cooldowns[keyOf(c)]; e != nil {
			e.pass = b.pass
			if e.v == v {
				continue
			}
		}
		d.puts.Cooldowns = append(d.puts.Cooldowns, c)
	}
	for _, e := range st.Ended {
		if x := b.ended[e.ID]; x != nil {
			x.pass = b.pass
			continue
		}
		d.puts.Ended = append(d.puts.Ended, e)
	}
	nowNanos := now.UnixNano()
	for id, e := range b.leases {
		if e.pass != b.pass {
			d.deletedLeases = append(d.deletedLeases, id)
		}
	}
	for k, e := range b.cooldowns {
		if e.pass != b.pass {
			if e.v.until <= nowNanos {
				delete(b.cooldowns, k)
				continue
			}
			d.deletedCooldowns = append(d.deletedCooldowns, k)
		}
	}
	for id, e := range b.ended {
		if e.pass != b.pass {
			if e.v <= nowNanos {
				delete(b.ended, id)
				continue
			}
			d.deletedEnded = append(d.deletedEnded, id)
		}
	}
}

// empty reports whether d writes nothing, the revision included (it must
// never go back: the API's resourceVersions come from it).
func (b *baseline) empty(d *delta) bool { return d.changes() == 0 && d.puts.Revision == b.revision }

// apply makes the baseline what it is once d is stored.
func (b *baseline) apply(d *delta) {
	b.revision = d.puts.Revision
	for i := range d.puts.Leases {
		mark(b.leases, d.puts.Leases[i].ID, d.puts.Leases[i].Revision, b.pass)
	}
	for _, c := range d.puts.Cooldowns {
		mark(b.cooldowns, keyOf(c), untilOf(c), b.pass)
	}
	for _, e := range d.puts.Ended {
		mark(b.ended, e.ID, unixNano(e.Until), b.pass)
	}
	for _, id := range d.deletedLeases {
		delete(b.leases, id)
	}
	for _, k := range d.deletedCooldowns {
		delete(b.cooldowns, k)
	}
	for _, id := range d.deletedEnded {
		delete(b.ended, id)
	}
}

// replay applies the journal's deltas, oldest first, to st (a snapshot):
// what a load restores.
func replay(st *lease.State, deltas []delta) {
	if len(deltas) == 0 {
		return
	}
	leases := make(map[string]int, len(st.Leases))
	for i := range st.Leases {
		leases[st.Leases[i].ID] = i
	}
	cooldowns := make(map[cooldownKey]int, len(st.Cooldowns))
	for i, c := range st.Cooldowns {
		cooldowns[keyOf(c)] = i
	}
	ended := make(map[string]int, len(st.Ended))
	for i, e := range st.Ended {
		ended[e.ID] = i
	}
	for i := range deltas {
		d := &deltas[i]
		st.Revision, st.TakenAt = d.puts.Revision, d.puts.TakenAt
		for _, id := range d.deletedLeases {
			delete(leases, id)
		}
		for _, k := range d.deletedCooldowns {
			delete(cooldowns, k)
		}
		for _, id := range d.deletedEnded {
			delete(ended, id)
		}
		st.Leases = put(st.Leases, leases, d.puts.Leases, func(l lease.Lease) string { return l.ID })
		st.Cooldowns = put(st.Cooldowns, cooldowns, d.puts.Cooldowns, keyOf)
		st.Ended = put(st.Ended, ended, d.puts.Ended, func(e lease.EndedLease) string { return e.ID })
	}
	st.Leases = keep(st.Leases, func(i int, l lease.Lease) bool { j, ok := leases[l.ID]; return ok && j == i })
	st.Cooldowns = keep(st.Cooldowns, func(i int, c lease.Cooldown) bool {
		j, ok := cooldowns[keyOf(c)]
		return ok && j == i
	})
	st.Ended = keep(st.Ended, func(i int, e lease.EndedLease) bool { j, ok := ended[e.ID]; return ok && j == i })
}

// put writes vs into s, each over the element of its key (index: key →
// position in s) or after the last.
func put[K comparable, V any](s []V, index map[K]int, vs []V, key func(V) K) []V {
	for _, v := range vs {
		if j, ok := index[key(v)]; ok {
			s[j] = v
		} else {
			index[key(v)] = len(s)
			s = append(s, v)
		}
	}
	return s
}

// keep is s without the elements ok refuses, in order.
func keep[T any](s []T, ok func(i int, v T) bool) []T {
	out := s[:0]
	for i, v := range s {
		if ok(i, v) {
			out = append(out, v)
		}
	}
	return out
}
