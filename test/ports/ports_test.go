package ports

import (
	"net"
	"slices"
	"strconv"
	"testing"
)

// Free gives different ports, none of those already taken, each free
// to bind once returned.
func TestFreeAreDifferentAndFree(t *testing.T) {
	taken, err := Free(8)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		ports, err := Free(16, taken...)
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

func listen(t *testing.T, port int) (net.Listener, error) {
	t.Helper()
	return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// The free ports of one reservation are all different: each stays bound
// (another bind of it fails) until Release, which frees them all.
func TestReservationHoldsEveryPortUntilRelease(t *testing.T) {
	var r Reservation
	defer r.Release()
	ports := map[int]bool{}
	for range 4 * 20 { // twenty replicas' worth
		p, err := r.Reserve(0)
		if err != nil {
			t.Fatal(err)
		}
		if ports[p] {
			t.Fatalf("port %d reserved twice", p)
		}
		ports[p] = true
	}
	for p := range ports {
		if ln, err := listen(t, p); err == nil {
			ln.Close()
			t.Fatalf("port %d could be bound while reserved", p)
		}
	}
	r.Release()
	for p := range ports {
		ln, err := listen(t, p)
		if err != nil {
			t.Fatalf("port %d after release: %v", p, err)
		}
		ln.Close()
	}
	r.Release() // again: nothing left to close
}
