package framework

import (
	"net"
	"slices"
	"strconv"
	"testing"
)

// FreePorts gives different ports, none of those already taken, each free
// to bind once returned.
func TestFreePortsAreDifferentAndFree(t *testing.T) {
	taken, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		ports, err := FreePorts(16, taken...)
		if err != nil {
			t.Fatal(err)
		}
		if len(ports) != 16 {
			t.Fatalf("%d ports, want 16", len(ports))
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if seen[p] || slices.Contains(taken, p) {
				t.Fatalf("port %d repeated or taken: %v (taken %v)", p, ports, taken)
			}
			seen[p] = true
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d not free: %v", p, err)
			}
			ln.Close()
		}
	}
}
