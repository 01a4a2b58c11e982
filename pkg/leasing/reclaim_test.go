package leasing

import (
	"context"
	"errors"
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
			s.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: n, URL: "http://127.0.0.2:3128", Healthy: true, Attributes: map[string]string{"name": n}})
		}
	}
	a, err := lease.New(lease.Options{MaxTTL: time.Hour, IDs: signer}, clk)
	if err != nil {
		t.Fatal(err)
	}
	proxies(a)
	var st lease.State
	a.StateInto(&st)
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
	// Renew and release each take a lost lease back first.
	if got, err := svc.Renew("http:a", lost[0].ID, time.Minute); err != nil || got.Proxy.Name != lost[0].Proxy.Name {
		t.Errorf("renew of a lost lease = %+v, %v; want it back on %s", got, err, lost[0].Proxy.Name)
	}
	if ok, err := svc.Release("http:a", lost[2].ID); !ok || err != nil {
		t.Errorf("release of a lost lease = %v, %v; want true", ok, err)
	}
	if _, err := svc.Renew("http:a", lost[2].ID, time.Minute); !IsEnded(err) {
		t.Errorf("renew of the lost lease released since: %v, want ended", err)
	}
	// A report starts the cooldown and takes nothing back: its holder may
	// have released it before the crash. Its holder's renew still does.
	if err := svc.Report("http:a", lost[1].ID, lease.ResultBanned, ""); err != nil {
		t.Errorf("report on a lost lease: %v", err)
	}
	if _, err := svc.Get("http:a", lost[1].ID); !IsNotFound(err) {
		t.Errorf("the reported lost lease: %v, want not found (not taken back)", err)
	}
	if !cooling(store, lost[1].Proxy.Name, "site") {
		t.Errorf("the report on the lost lease started no cooldown of %s for its target", lost[1].Proxy.Name)
	}
	if counts := store.Counts(); counts[lease.ProxyKey{Namespace: "ns", Name: lost[0].Proxy.Name}] != 1 || len(counts) != 1 {
		t.Errorf("leases per proxy after the reclaims: %v", counts)
	}
	if got, err := svc.Renew("http:a", lost[1].ID, time.Minute); err != nil || got.Proxy.Name != lost[1].Proxy.Name {
		t.Errorf("renew of the reported lost lease = %+v, %v; want it back on %s", got, err, lost[1].Proxy.Name)
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

// cooling reports whether proxy ns/name is cooling for target: a lease for
// target on it, and only it, finds no match.
func cooling(store *lease.Store, name, target string) bool {
	_, err := store.Acquire(lease.AcquireRequest{Selector: map[string]string{"name": name}, Target: target, Holder: "probe"})
	var nm *lease.NoMatchError
	return errors.As(err, &nm) && nm.InCooldown > 0
}

// A lease granted and released between the last checkpoint and a crash does
// not come back on a late report (on today's store it did: the report took
// it back and it held its proxy until its expiry); the report still cools.
func TestLateReportDoesNotResurrectAReleasedLease(t *testing.T) {
	svc, store, _, lost := afterCrash(t)
	// lost[0] was released before the crash: a late report arrives after.
	for _, report := range []func() error{
		func() error { return svc.Report("http:a", lost[0].ID, lease.ResultRateLimited, "") },
		func() error { return svc.ReportByName(lease.AnyHolder, "ns", lost[0].ID, lease.ResultRateLimited, "") },
	} {
		if err := report(); err != nil {
			t.Fatalf("late report on a released lost lease: %v", err)
		}
		if _, ok := store.Get(lost[0].ID); ok {
			t.Fatalf("the released lease came back live after a late report")
		}
	}
	if len(store.Counts()) != 0 {
		t.Errorf("a late report left a lease holding a proxy: %v", store.Counts())
	}
	if !cooling(store, lost[0].Proxy.Name, "site") {
		t.Errorf("the late report started no cooldown")
	}
	// Refusals stay: another holder, another namespace, a random ID.
	if err := svc.Report("http:b", lost[1].ID, lease.ResultBanned, ""); !IsForbidden(err) {
		t.Errorf("report by another holder: %v, want forbidden", err)
	}
	if err := svc.ReportByName(lease.AnyHolder, "other", lost[1].ID, lease.ResultBanned, ""); !IsNotFound(err) {
		t.Errorf("report in another namespace: %v, want not found", err)
	}
	if err := svc.Report("http:a", "0123456789abcdef0123456789abcdef", lease.ResultBanned, ""); !IsNotFound(err) {
		t.Errorf("report on a random ID: %v, want not found", err)
	}
	if cooling(store, lost[1].Proxy.Name, "site") {
		t.Errorf("a refused report cooled %s", lost[1].Proxy.Name)
	}
}

// DELETE stays idempotent whatever the reclaim rules answer: a second
// release of a lease released a moment ago, of a lost lease released once,
// of a lost lease whose proxy was taken since, of an expired lost lease and
// of an unknown ID all succeed without ending anything (on today's service
// the first answered "ended").
func TestReleaseIsIdempotent(t *testing.T) {
	svc, store, _, lost := afterCrash(t)
	fresh, err := svc.Acquire(context.Background(), Request{Selector: map[string]string{"name": lost[0].Proxy.Name}, Identity: Identity{Holder: "http:a", Flow: "http:a"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := svc.Release("http:a", fresh.ID); !ok || err != nil {
		t.Fatalf("first release = %v, %v", ok, err)
	}
	if ok, err := svc.Release("http:a", lost[1].ID); !ok || err != nil {
		t.Fatalf("first release of a lost lease = %v, %v", ok, err)
	}
	// lost[2]'s proxy is taken to capacity (1 here) since the crash.
	taker, err := store.Acquire(lease.AcquireRequest{Selector: map[string]string{"name": lost[2].Proxy.Name}, Holder: "http:c"})
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{
		"released a moment ago":       fresh.ID,
		"lost, released once":         lost[1].ID,
		"lost, its proxy taken since": lost[2].ID,
		"lost, expired":               lost[3].ID,
		"unknown":                     "0123456789abcdef0123456789abcdef",
	} {
		if ok, err := svc.Release("http:a", id); ok || err != nil {
			t.Errorf("%s: release = %v, %v; want false, nil", name, ok, err)
		}
	}
	if _, err := svc.Get("http:c", taker.ID); err != nil {
		t.Errorf("the lease that took the room: %v", err)
	}
	// Another holder's lost lease is still refused.
	if _, err := svc.Release("http:b", lost[0].ID); !IsForbidden(err) {
		t.Errorf("release of another holder's lost lease: %v, want forbidden", err)
	}
}
