package lease

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A request limited to some namespaces gets the best proxy among them only,
// and its no-match counts cover only them.
func TestAcquireWithinNamespaces(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	s.UpsertProxy(px("a", "fast-a", 1, "zone", "x"))
	s.UpsertProxy(px("b", "slow-b", 9, "zone", "x"))
	s.UpsertProxy(px("c", "fastest-c", 0, "zone", "x"))
	s.UpsertProxy(px("d", "other-zone-d", 0, "zone", "y"))
	req := AcquireRequest{Namespaces: []string{"a", "b", "d"}, Selector: map[string]string{"zone": "x"}}
	var got []string
	for range 2 {
		l, err := s.Acquire(req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l.Proxy.Name)
	}
	if diff := cmp.Diff([]string{"fast-a", "slow-b"}, got); diff != "" {
		t.Errorf("grants in selection order over a, b and d (-want +got):\n%s", diff)
	}
	_, err := s.Acquire(req)
	nm, ok := err.(*NoMatchError)
	if !ok {
		t.Fatalf("third acquire: %v, want *NoMatchError", err)
	}
	if diff := cmp.Diff(NoMatchError{Considered: 2, AtCapacity: 2}, *nm); diff != "" {
		t.Errorf("counts over a, b and d only (-want +got):\n%s", diff)
	}
	// Negative control: without the limit, c's proxy is there.
	if l, err := s.Acquire(AcquireRequest{Selector: map[string]string{"zone": "x"}}); err != nil || l.Proxy.Name != "fastest-c" {
		t.Errorf("an unlimited request: %v, %v; want fastest-c", l, err)
	}
	// An empty list allows no namespace at all.
	if _, err := s.Acquire(AcquireRequest{Namespaces: []string{}}); !IsNoMatch(err) {
		t.Errorf("a request limited to no namespace: %v, want no match", err)
	}
}
