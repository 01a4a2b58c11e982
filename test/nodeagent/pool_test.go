package nodeagent

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestNewAddrPool(t *testing.T) {
	tests := []struct {
		name        string
		first, last string
		wantErr     bool
		wantSize    int
	}{
		{"default range", "127.0.0.2", "127.0.0.254", false, 253},
		{"single address", "127.0.0.9", "127.0.0.9", false, 1},
		{"across octets", "127.0.0.250", "127.0.1.5", false, 12},
		{"reversed", "127.0.0.9", "127.0.0.2", true, 0},
		{"not loopback", "10.0.0.2", "10.0.0.9", true, 0},
		{"IPv6 loopback", "::1", "::1", true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewAddrPool(addr(tc.first), addr(tc.last))
			if (err != nil) != tc.wantErr {
				t.Fatalf("NewAddrPool(%s, %s) error = %v, wantErr %v", tc.first, tc.last, err, tc.wantErr)
			}
			if err == nil && p.Size() != tc.wantSize {
				t.Errorf("Size() = %d, want %d", p.Size(), tc.wantSize)
			}
		})
	}
}

// allocN allocates n addresses and returns them as strings ("" on error).
func allocN(t *testing.T, p *AddrPool, n int, skip func(netip.Addr) bool) []string {
	t.Helper()
	var out []string
	for range n {
		a, err := p.Allocate(skip)
		if err != nil {
			out = append(out, "")
			continue
		}
		out = append(out, a.String())
	}
	return out
}

func TestAddrPoolAllocate(t *testing.T) {
	p, err := NewAddrPool(addr("127.0.0.2"), addr("127.0.0.4"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}, allocN(t, p, 3, nil)); diff != "" {
		t.Errorf("first allocations (-want +got):\n%s", diff)
	}
	if p.InUse() != 3 {
		t.Errorf("InUse() = %d, want 3", p.InUse())
	}
	if _, err := p.Allocate(nil); !IsPoolExhausted(err) {
		t.Errorf("Allocate from a full pool: %v, want ErrPoolExhausted", err)
	}

	// Freed addresses come back round-robin, the oldest free first.
	p.Release(addr("127.0.0.3"))
	p.Release(addr("127.0.0.2"))
	if diff := cmp.Diff([]string{"127.0.0.2", "127.0.0.3", ""}, allocN(t, p, 3, nil)); diff != "" {
		t.Errorf("allocations after releases (-want +got):\n%s", diff)
	}

	// Releasing twice or releasing a stranger changes nothing.
	p.Release(addr("127.0.0.4"))
	p.Release(addr("127.0.0.4"))
	p.Release(addr("127.0.0.99"))
	if p.InUse() != 2 {
		t.Errorf("InUse() after double release = %d, want 2", p.InUse())
	}
}

func TestAddrPoolRoundRobinAvoidsImmediateReuse(t *testing.T) {
	p, err := NewAddrPool(addr("127.0.0.2"), addr("127.0.0.5"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Allocate(nil)
	p.Release(a)
	b, _ := p.Allocate(nil)
	if a == b {
		t.Errorf("a released address (%v) was handed out again while others were free", a)
	}
}

func TestAddrPoolSkip(t *testing.T) {
	p, err := NewAddrPool(addr("127.0.0.2"), addr("127.0.0.4"))
	if err != nil {
		t.Fatal(err)
	}
	busy := func(a netip.Addr) bool { return a == addr("127.0.0.2") || a == addr("127.0.0.3") }
	if diff := cmp.Diff([]string{"127.0.0.4", ""}, allocN(t, p, 2, busy)); diff != "" {
		t.Errorf("allocations with skips (-want +got):\n%s", diff)
	}
	// A skipped address was not taken: without the veto it is available.
	if diff := cmp.Diff([]string{"127.0.0.2", "127.0.0.3"}, allocN(t, p, 2, nil)); diff != "" {
		t.Errorf("allocations after the veto is lifted (-want +got):\n%s", diff)
	}
}
