package client_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/leasing/leasingtest"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// fullWaiter is a wait queue that is full: a request that would wait is
// refused at once with a retry hint; one without a wait (deadline now) is
// answered by the store.
type fullWaiter struct {
	calls int
	inner *leasingtest.Queue
	clock *clocktesting.FakeClock
}

var _ leasing.Queue = (*fullWaiter)(nil)

func (w *fullWaiter) Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error) {
	if !deadline.After(w.clock.Now()) {
		return w.inner.Wait(ctx, req, priority, deadline)
	}
	w.calls++
	return nil, &leasing.Error{Reason: leasing.ReasonQueueFull, RetryAfter: 4 * time.Second, Cause: errors.New("band queue full")}
}

// newServer runs the real discovery server over a real store.
func newServer(t *testing.T) (*httptest.Server, *lease.Store, *clocktesting.FakeClock, *fullWaiter) {
	t.Helper()
	fc := clocktesting.NewFakeClock(t0)
	n := 0
	store, err := lease.New(lease.Options{MaxTTL: time.Hour, NewID: func() string { n++; return fmt.Sprintf("id/%d", n) }}, fc)
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "a", Name: "p1", URL: "http://127.0.0.1:3128", Host: "127.0.0.1", Port: 3128,
		Attributes: map[string]string{"region": "eu"}, LatencyMillis: 3, Healthy: true})
	store.UpsertProxy(lease.ProxyInfo{Namespace: "a", Name: "p2", Attributes: map[string]string{"region": "us"}, Healthy: false})
	w := &fullWaiter{inner: &leasingtest.Queue{Store: store}, clock: fc}
	svc, err := leasing.NewService(leasing.APIHTTP, discovery.DefaultMaxWait, leasing.ServiceDeps{Store: store, Queue: w, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	s, err := discovery.New(discovery.Options{Tokens: discovery.Tokens{"tok": {Identity: discovery.DefaultIdentity}, "other-tok": {Identity: "other"}}, Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv, store, fc, w
}

func TestClientAgainstServer(t *testing.T) {
	srv, store, fc, waiter := newServer(t)
	ctx := context.Background()
	c, err := client.New(srv.URL+"/", "tok")
	if err != nil {
		t.Fatal(err)
	}

	healthy := true
	proxies, err := c.ListProxies(ctx, client.ListOptions{Selector: map[string]string{"region": "eu"}, Namespace: "a", Healthy: &healthy})
	if err != nil {
		t.Fatal(err)
	}
	if len(proxies) != 1 || proxies[0].Name != "p1" || !proxies[0].Healthy {
		t.Errorf("ListProxies = %+v", proxies)
	}

	l, err := c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"region": "eu"}, Target: "example.com", TTLSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	want := &wire.Lease{LeaseID: "id/1", TTLSeconds: 60, ExpiresAt: t0.Add(time.Minute), ProxyHealthy: true, Proxy: wire.Proxy{
		Name: "p1", Namespace: "a", URL: "http://127.0.0.1:3128", Host: "127.0.0.1", Port: 3128, Attributes: map[string]string{"region": "eu"}, LatencyMillis: 3}}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("lease (-want +got):\n%s", diff)
	}

	// The only healthy proxy is taken: no_match with counts.
	_, err = c.Acquire(ctx, wire.AcquireRequest{})
	var apiErr *client.APIError
	if !client.IsNoMatch(err) || !errors.As(err, &apiErr) || apiErr.StatusCode != 409 {
		t.Fatalf("second acquire: %v", err)
	}
	if diff := cmp.Diff(&client.NoMatch{Considered: 2, AtCapacity: 1, Unhealthy: 1}, apiErr.NoMatch); diff != "" {
		t.Errorf("no-match counts (-want +got):\n%s", diff)
	}

	_, err = c.Acquire(ctx, wire.AcquireRequest{TTLSeconds: 7200})
	if !client.IsTTLTooLong(err) || !errors.As(err, &apiErr) || apiErr.MaxTTLSeconds != 3600 {
		t.Errorf("long TTL: %v", err)
	}

	_, err = c.Acquire(ctx, wire.AcquireRequest{WaitSeconds: 10})
	if after, ok := client.IsQueueFull(err); !ok || after != 4*time.Second || waiter.calls != 1 {
		t.Errorf("queue full: %v (retry after %v, waiter calls %d)", err, after, waiter.calls)
	}

	// The ID contains a slash: the client escapes it.
	if err := c.Report(ctx, l.LeaseID, wire.ResultRateLimited, ""); err != nil {
		t.Fatalf("Report: %v", err)
	}
	if err := c.Report(ctx, l.LeaseID, "meh", ""); !client.IsInvalidResult(err) {
		t.Errorf("invalid result: %v", err)
	}
	if err := c.Report(ctx, "nope", wire.ResultOK, ""); !client.IsUnknownLease(err) {
		t.Errorf("unknown lease: %v", err)
	}

	fc.Step(30 * time.Second)
	r, err := c.Renew(ctx, l.LeaseID, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r.TTLSeconds != 600 || !r.ExpiresAt.Equal(t0.Add(30*time.Second+10*time.Minute)) {
		t.Errorf("renewed %+v", r)
	}

	if err := c.Release(ctx, l.LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, l.LeaseID); err != nil {
		t.Errorf("second release: %v", err)
	}
	if store.Active() != 0 {
		t.Errorf("%d active leases after release", store.Active())
	}
	if _, err := c.Renew(ctx, l.LeaseID, 0); !client.IsLeaseEnded(err) {
		t.Errorf("renew after release: %v", err)
	}
	// The report after release still lands: the pair (p1, example.com) cools.
	if _, err := c.Acquire(ctx, wire.AcquireRequest{Target: "example.com"}); !client.IsNoMatch(err) {
		t.Errorf("acquire of a cooling pair: %v", err)
	}
}

func TestClientErrors(t *testing.T) {
	srv, _, _, _ := newServer(t)
	ctx := context.Background()

	anon, _ := client.New(srv.URL, "")
	if _, err := anon.ListProxies(ctx, client.ListOptions{}); !client.IsUnauthorized(err) {
		t.Errorf("without token: %v", err)
	}
	wrong, _ := client.New(srv.URL, "wrong")
	if _, err := wrong.Acquire(ctx, wire.AcquireRequest{}); !client.IsUnauthorized(err) {
		t.Errorf("wrong token: %v", err)
	}
	for _, bad := range []string{"", "ftp://x", "://", "localhost:8090"} {
		if _, err := client.New(bad, "t"); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	c, _ := client.New(srv.URL, "tok")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Acquire(cctx, wire.AcquireRequest{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	// A non-JSON error body (e.g. from an intermediate proxy) is still an APIError.
	plain := httptest.NewServer(nil) // DefaultServeMux: plain-text 404
	defer plain.Close()
	pc, _ := client.New(plain.URL, "tok")
	var apiErr *client.APIError
	if _, err := pc.ListProxies(ctx, client.ListOptions{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "" {
		t.Errorf("plain-text error: %v", err)
	}
}

// Another identity's release, report and renew are 403 forbidden, which
// IsForbidden recognises, and the lease stays.
func TestClientForbidden(t *testing.T) {
	srv, store, _, _ := newServer(t)
	ctx := context.Background()
	holder, err := client.New(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	other, err := client.New(srv.URL, "other-tok")
	if err != nil {
		t.Fatal(err)
	}
	l, err := holder.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"region": "eu"}, TTLSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx, l.LeaseID); !client.IsForbidden(err) {
		t.Errorf("Release by another identity = %v, want forbidden", err)
	}
	if err := other.Report(ctx, l.LeaseID, wire.ResultBanned, ""); !client.IsForbidden(err) {
		t.Errorf("Report by another identity = %v, want forbidden", err)
	}
	if _, err := other.Renew(ctx, l.LeaseID, time.Minute); !client.IsForbidden(err) {
		t.Errorf("Renew by another identity = %v, want forbidden", err)
	}
	if _, ok := store.Get(l.LeaseID); !ok {
		t.Error("another identity's calls ended the lease")
	}
	if got, err := holder.Get(ctx, l.LeaseID); err != nil || got.LeaseID != l.LeaseID || got.Proxy.Name != "p1" || !got.ProxyHealthy {
		t.Errorf("Get by the holder = %+v, %v", got, err)
	}
	if _, err := other.Get(ctx, l.LeaseID); !client.IsForbidden(err) {
		t.Errorf("Get by another identity = %v, want forbidden", err)
	}
	if client.IsForbidden(holder.Release(ctx, l.LeaseID)) {
		t.Error("the holder's own release is forbidden")
	}
}

// TestClientVerifiesTheServer: over https the client trusts only the CA it is
// given (LoadCAFile/WithRootCAs), never an unknown certificate.
func TestClientVerifiesTheServer(t *testing.T) {
	plain, _, _, _ := newServer(t)
	ts := httptest.NewUnstartedServer(plain.Config.Handler)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	roots, err := client.LoadCAFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	trusting, err := client.New(ts.URL, "tok", client.WithRootCAs(roots))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trusting.ListProxies(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("with the server's CA: %v", err)
	}
	// Negative control: the system roots do not know the test CA.
	untrusting, err := client.New(ts.URL, "tok", client.WithRootCAs(x509.NewCertPool()))
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if _, err := untrusting.ListProxies(ctx, client.ListOptions{}); !errors.As(err, &unknown) {
		t.Fatalf("without the CA: %v, want an unknown-authority error", err)
	}
	if _, err := client.LoadCAFile(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("LoadCAFile of a missing file succeeded")
	}
	empty := filepath.Join(t.TempDir(), "empty.crt")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.LoadCAFile(empty); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("LoadCAFile of a non-PEM file: %v", err)
	}
}

// A refusal behind the caller's own waiting requests carries free and
// queuedAhead, so a crawler can tell it from a busy fleet.
func TestNoMatchCarriesFreeAndQueuedAhead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"error":"no_match","message":"1 earlier requests wait","considered":3,"atCapacity":1,"inCooldown":0,"unhealthy":0,"free":2,"queuedAhead":1}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(t.Context(), wire.AcquireRequest{Target: "a.test"})
	var apiErr *client.APIError
	if !client.IsNoMatch(err) || !errors.As(err, &apiErr) {
		t.Fatalf("acquire: %v, want no_match", err)
	}
	if diff := cmp.Diff(&client.NoMatch{Considered: 3, AtCapacity: 1, Free: 2, QueuedAhead: 1}, apiErr.NoMatch); diff != "" {
		t.Errorf("no-match counts (-want +got):\n%s", diff)
	}
}

// A ladder goes over the wire and the answer's tier comes back: p2 (us) is
// unhealthy, so a ladder us, eu climbs to eu (tier 1); a ladder whose last
// tier cannot serve either is a no match that names the tier.
func TestClientLadder(t *testing.T) {
	srv, _, _, _ := newServer(t)
	ctx := context.Background()
	c, err := client.New(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, wire.AcquireRequest{Selectors: []map[string]string{{"region": "us"}, {"region": "eu"}}, Target: "example.com"})
	if err != nil || l.Tier != 1 || l.Proxy.Name != "p1" {
		t.Fatalf("ladder us, eu: %+v, %v; want p1 on tier 1", l, err)
	}
	_, err = c.Acquire(ctx, wire.AcquireRequest{Selectors: []map[string]string{{"region": "us"}, {"region": "asia"}}, Target: "example.com"})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.NoMatch == nil || ae.NoMatch.Tier != 1 || ae.NoMatch.Considered != 0 {
		t.Errorf("ladder us, asia: %v (%+v), want a no match of tier 1 with nothing considered", err, ae)
	}
	_, err = c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"region": "eu"}, Selectors: []map[string]string{{}}})
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, "selectors") {
		t.Errorf("selector and selectors: %v, want a 400 naming selectors", err)
	}
}
