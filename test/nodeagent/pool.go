package nodeagent

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// ErrPoolExhausted: every address of the pool is allocated or skipped.
var ErrPoolExhausted = errors.New("address pool exhausted")

// IsPoolExhausted reports whether err is (or wraps) ErrPoolExhausted.
func IsPoolExhausted(err error) bool { return errors.Is(err, ErrPoolExhausted) }

// Default pool bounds: 127.0.0.1 is left to everything else on the machine.
var (
	DefaultPoolFirst = netip.AddrFrom4([4]byte{127, 0, 0, 2})
	DefaultPoolLast  = netip.AddrFrom4([4]byte{127, 0, 0, 254})
)

// AddrPool hands out IPv4 loopback addresses from an inclusive range, one per
// squid. It allocates round-robin, so a freed address is reused last: a
// replacement pod gets a new IP, and a late client of the old pod does not
// reach the new one. Safe for concurrent use.
type AddrPool struct {
	mu          sync.Mutex
	first, last netip.Addr
	next        netip.Addr
	used        map[netip.Addr]bool
}

// NewAddrPool returns a pool of first..last; both must be IPv4 loopback
// addresses with first <= last.
func NewAddrPool(first, last netip.Addr) (*AddrPool, error) {
	for _, a := range []netip.Addr{first, last} {
		if !a.Is4() || !a.IsLoopback() {
			return nil, fmt.Errorf("address pool: %v is not an IPv4 loopback address", a)
		}
	}
	if last.Less(first) {
		return nil, fmt.Errorf("address pool: first %v is after last %v", first, last)
	}
	return &AddrPool{first: first, last: last, next: first, used: map[netip.Addr]bool{}}, nil
}

// Size is the number of addresses in the range.
func (p *AddrPool) Size() int {
	f, l := p.first.As4(), p.last.As4()
	return int(u32(l)-u32(f)) + 1
}

// InUse is the number of allocated addresses.
func (p *AddrPool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.used)
}

// Allocate returns a free address. skip, when non-nil, vetoes candidates
// (e.g. an address some other process already serves on); a vetoed address
// stays free. ErrPoolExhausted when no address qualifies.
func (p *AddrPool) Allocate(skip func(netip.Addr) bool) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.next
	for range p.Size() {
		cand := a
		a = p.after(a)
		if p.used[cand] || (skip != nil && skip(cand)) {
			continue
		}
		p.used[cand] = true
		p.next = a
		return cand, nil
	}
	return netip.Addr{}, fmt.Errorf("allocating from %v-%v (%d in use): %w", p.first, p.last, len(p.used), ErrPoolExhausted)
}

// Release frees a. Releasing an address that is not allocated is a no-op.
func (p *AddrPool) Release(a netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, a)
}

// after returns the address following a, wrapping to first after last.
func (p *AddrPool) after(a netip.Addr) netip.Addr {
	if a == p.last {
		return p.first
	}
	return a.Next()
}

func u32(b [4]byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
