package leasing

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
)

// afterCrash grants, on a store that signs its IDs, one lease per proxy p1–p4
// after its state was taken (as a checkpoint), then "crashes": the service
// returned runs on a new store that restored that state and knows the same
// proxies. The lost leases come back with the IDs returned.
func afterCrash(t *testing.T) (*Service, *lease.Store, *clocktesting.FakeClock, []*lease.Lease) {
	t.Helper()
	clk := clocktesting.NewFakeClock(epoch)
	signer := leaseid.NewSigner()
	if err := signer.SetKey([]byte(strings.Repeat("k", leaseid.KeySize))); err != nil {
		t.Fatal(err)
	}
	proxies := func(s *lease.Store) {
		for _, n := range []string{"p1", "p2", "p3", "p4"} {
			s.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: n, URL: "http://127.0.0.2:3128", Healthy: true})
		}
	}
	a, err := lease.New(lease.Options{MaxTTL: time.Hour, IDs: signer}, clk)
	if err != nil {
		t.Fatal(err)
	}
	proxies(a)
	st, _ := a.State()
	clk.Step(time.Second)
	var lost []*lease.Lease
	for i := range 4 {
		ttl := time.Minute
		if i == 3 {
			ttl = 2 * time.Second
		}
		l, err := a.Acquire(lease.AcquireRequest{Holder: "http:a", Flow: "http:a", Target: "site", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		lost = append(lost, l)
	}
	clk.Step(4 * time.Second) // the crash and the takeover; lost[3] expired
	b, err := lease.New(lease.Options{MaxTTL: time.Hour, IDs: signer}, clk)
	if err != nil {
		t.Fatal(err)
	}
	proxies(b)
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(APIHTTP, 0, ServiceDeps{Store: b, Queue: &scriptedQueue{store: b}, Clock: clk, IDs: signer})
	if err != nil {
		t.Fatal(err)
	}
	return svc, b, clk, lost
}

func TestReclaimAfterACrash(t *testing.T) {
	svc, store, _, lost := afterCrash(t)
	for _, l := range lost {
		if _, err := svc.Get("http:a", l.ID); !IsNotFound(err) {
			t.Fatalf("control: lost lease %s is known before it is reclaimed: %v", l.ID, err)
		}
	}
	// Renew, report and release each take a lost lease back first.
	if got, err := svc.Renew("http:a", lost[0].ID, time.Minute); err != nil || got.Proxy.Name != lost[0].Proxy.Name {
		t.Errorf("renew of a lost lease = %+v, %v; want it back on %s", got, err, lost[0].Proxy.Name)
	}
	if err := svc.Report("http:a", lost[1].ID, lease.ResultBanned, ""); err != nil {
		t.Errorf("report on a lost lease: %v", err)
	}
	if l, err := svc.Get("http:a", lost[1].ID); err != nil || l.LastResult != lease.ResultBanned {
		t.Errorf("the reported lease after the reclaim: %+v, %v", l, err)
	}
	if ok, err := svc.Release("http:a", lost[2].ID); !ok || err != nil {
		t.Errorf("release of a lost lease = %v, %v; want true", ok, err)
	}
	if counts := store.Counts(); counts[lease.ProxyKey{Namespace: "ns", Name: lost[0].Proxy.Name}] != 1 || len(counts) != 2 {
		t.Errorf("leases per proxy after the reclaims: %v", counts)
	}
	// An expired one is gone, with the reason.
	if _, err := svc.Renew("http:a", lost[3].ID, time.Minute); !IsEnded(err) || AsError(err).EndReason != lease.Expired {
		t.Errorf("renew of an expired lost lease: %v", err)
	}
}

func TestReclaimRefusals(t *testing.T) {
	svc, store, _, lost := afterCrash(t)
	id := lost[0].ID
	forged := []byte(id)
	forged[10] ^= 1
	for name, tc := range map[string]struct {
		err  func() error
		want Reason
	}{
		"another holder":    {func() error { _, err := svc.Renew("http:b", id, time.Minute); return err }, ReasonForbidden},
		"another namespace": {func() error { _, err := svc.Reclaim(lease.AnyHolder, "other", id); return err }, ReasonNotFound},
		"tampered":          {func() error { _, err := svc.Renew("http:a", string(forged), time.Minute); return err }, ReasonNotFound},
		"random":            {func() error { return svc.Report("http:a", "0123456789abcdef0123456789abcdef", lease.ResultOK, "") }, ReasonNotFound},
	} {
		if got := ReasonOf(tc.err()); got != tc.want {
			t.Errorf("%s: reason %q, want %q", name, got, tc.want)
		}
	}
	if ok, err := svc.Release("http:a", "0123456789abcdef0123456789abcdef"); ok || err != nil {
		t.Errorf("release of a random ID = %v, %v; want false, nil (idempotent)", ok, err)
	}
	if len(store.Counts()) != 0 {
		t.Errorf("a refused reclaim took a lease back: %v", store.Counts())
	}
	// Its proxy leased to capacity since: 409 no room, and the new lease stays.
	l, err := store.Acquire(lease.AcquireRequest{Selector: nil, Holder: "http:c"})
	if err != nil {
		t.Fatal(err)
	}
	var onItsProxy *lease.Lease
	for _, x := range lost[:3] {
		if x.Proxy.Name == l.Proxy.Name {
			onItsProxy = x
		}
	}
	if onItsProxy == nil {
		t.Fatalf("the new lease is on %s, where no lost lease was", l.Proxy.Name)
	}
	if _, err := svc.Renew("http:a", onItsProxy.ID, time.Minute); !IsNoRoom(err) {
		t.Errorf("renew of a lost lease whose proxy is full: %v", err)
	}
	if _, err := svc.Get("http:c", l.ID); err != nil {
		t.Errorf("the lease that took the room: %v", err)
	}
}
