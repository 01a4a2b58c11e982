package lease

import (
	"testing"
	"time"
)

// A draining proxy takes no new lease (counted at capacity), its live
// lease renews and its holder is told (ProxyChanged); undrained it is
// offered again (the control).
func TestDrainingProxy(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxLeasesPerProxy: 2})
	p := px("ns", "p1", 1, "tier", "gold")
	s.UpsertProxy(p)
	held := mustAcquire(t, s, AcquireRequest{Holder: "h", Selector: map[string]string{"tier": "gold"}, TTL: time.Minute})
	var events []Event
	defer s.Subscribe(func(ev Event) { events = append(events, ev) })()

	p.Draining = true
	s.UpsertProxy(p)
	if len(events) != 1 || events[0].Reason != ProxyChanged || !events[0].Lease.Proxy.Draining {
		t.Fatalf("events %+v, want one ProxyChanged showing the proxy draining", events)
	}
	_, err := s.Acquire(AcquireRequest{Selector: map[string]string{"tier": "gold"}})
	nm, ok := err.(*NoMatchError)
	if !ok || nm.Considered != 1 || nm.AtCapacity != 1 {
		t.Fatalf("acquire on a draining proxy: %v, want no match with it counted at capacity", err)
	}
	if l, err := s.RenewAs("h", held.ID, time.Minute); err != nil || !l.Proxy.Draining {
		t.Errorf("renew on a draining proxy: %+v, %v", l, err)
	}
	if bad := checkInvariants(s); len(bad) > 0 {
		t.Fatalf("invariants: %q", bad)
	}
	p.Draining = false
	s.UpsertProxy(p)
	if _, err := s.Acquire(AcquireRequest{Selector: map[string]string{"tier": "gold"}}); err != nil {
		t.Errorf("control: the undrained proxy is not offered: %v", err)
	}
}
