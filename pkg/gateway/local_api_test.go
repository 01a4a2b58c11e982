package gateway_test

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/gateway"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// leaseAPI is a real HTTP lease API over a lease store of one proxy, served
// over TLS; network counts the requests that reached it through the
// network.
type leaseAPI struct {
	handler   http.Handler
	inProcess *discovery.InProcess
	gate      *leasing.Gate
	srv       *httptest.Server
	network   atomic.Int64
	store     *lease.Store
}

func startLeaseAPI(t *testing.T) *leaseAPI {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store, err := lease.New(lease.Options{MaxLeasesPerProxy: 1, MaxTTL: time.Hour, DefaultTTL: time.Minute, CooldownWindow: time.Minute}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "crawl", Name: "p1", URL: "http://127.0.0.1:3128", Host: "127.0.0.1", Port: 3128, LatencyMillis: 1, Healthy: true})
	l := leasing.NewWithStore(store, leasing.DefaultOptions(), clock.RealClock{})
	l.Gate = leasing.NewGate(nil)
	l.Gate.Open()
	for _, r := range l.Runnables() {
		go func() { _ = r.Start(ctx) }()
	}
	svc, err := l.Service(leasing.APIHTTP, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := discovery.New(discovery.Options{Service: svc, Tokens: discovery.Tokens{
		"token-a": {Identity: "a", Namespaces: []string{"crawl"}},
		"token-b": {Identity: "b"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := &leaseAPI{handler: srv.Handler(), inProcess: srv.InProcess(), gate: l.Gate, store: store}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.network.Add(1)
		a.handler.ServeHTTP(w, r)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// leaser is the gateway's Leaser of a, as Options.Leaser builds it: in
// process while a serves leases when inProcess, else through the network.
func (a *leaseAPI) leaser(t *testing.T, inProcess bool) gateway.Leaser {
	t.Helper()
	o := gateway.DefaultOptions()
	o.LeaseAPIURL, o.LeaseInProcess = a.srv.URL, inProcess
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	l, err := o.Leaser(ca, &gateway.LocalAPI{Leaser: a.inProcess, Serving: a.gate.IsOpen})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// outcome is what a Leaser call came to, as the gateway reads it.
type outcome struct {
	Status     int
	Code       string
	Message    string
	MaxTTL     int64
	RetryAfter time.Duration
	NoMatch    *client.NoMatch
	Leased     bool
	ProxyURL   string
	TTL        int64
	Creds      bool
	Cooling    bool
}

func outcomeOf(l *wire.Lease, err error) outcome {
	var ae *client.APIError
	switch {
	case errors.As(err, &ae):
		return outcome{Status: ae.StatusCode, Code: ae.Code, Message: ae.Message, MaxTTL: ae.MaxTTLSeconds,
			RetryAfter: ae.RetryAfter, NoMatch: ae.NoMatch}
	case err != nil:
		return outcome{Message: err.Error()}
	case l == nil:
		return outcome{Status: http.StatusNoContent}
	}
	return outcome{Status: http.StatusOK, Leased: l.LeaseID != "", ProxyURL: l.Proxy.URL, TTL: l.TTLSeconds, Creds: l.Credentials != nil,
		Cooling: l.CoolingUntil != nil}
}

// TestLeaseInProcessAnswersAsTheNetwork: the gateway's lease calls served
// in this process get the answers the same API gives over TLS — the same
// authentication, namespaces, limits and errors — for one script of calls
// run against a fresh API each way; while the replica does not serve
// leases, the calls go through the network.
func TestLeaseInProcessAnswersAsTheNetwork(t *testing.T) {
	ctx := context.Background()
	type step struct {
		name string
		call func(l gateway.Leaser, leased *string) outcome
		// What the step must come to (messages aside): a door broken alike
		// both ways would still fail here.
		wantStatus  int
		wantCode    string
		wantCooling bool
	}
	acquire := func(token string, req wire.AcquireRequest) func(gateway.Leaser, *string) outcome {
		return func(l gateway.Leaser, leased *string) outcome {
			ls, err := l.Acquire(ctx, token, req)
			if err == nil {
				*leased = ls.LeaseID
			}
			return outcomeOf(ls, err)
		}
	}
	release := func(token string) func(gateway.Leaser, *string) outcome {
		return func(l gateway.Leaser, leased *string) outcome { return outcomeOf(nil, l.Release(ctx, token, *leased)) }
	}
	report := func(token, result, target string) func(gateway.Leaser, *string) outcome {
		return func(l gateway.Leaser, leased *string) outcome {
			return outcomeOf(nil, l.Report(ctx, token, *leased, result, target))
		}
	}
	renew := func(token string, ttl time.Duration) func(gateway.Leaser, *string) outcome {
		return func(l gateway.Leaser, leased *string) outcome { return outcomeOf(l.Renew(ctx, token, *leased, ttl)) }
	}
	getFor := func(token, target string) func(gateway.Leaser, *string) outcome {
		return func(l gateway.Leaser, leased *string) outcome {
			return outcomeOf(l.GetFor(ctx, token, *leased, target))
		}
	}
	unknown := func(f func(gateway.Leaser, *string) outcome) func(gateway.Leaser, *string) outcome {
		return func(l gateway.Leaser, _ *string) outcome { id := "no-such-lease"; return f(l, &id) }
	}
	steps := []step{
		{"an unknown token", acquire("nope", wire.AcquireRequest{Namespace: "crawl"}), http.StatusUnauthorized, wire.CodeUnauthorized, false},
		{"a namespace the token may not use", acquire("token-a", wire.AcquireRequest{Namespace: "other"}), http.StatusForbidden, wire.CodeForbidden, false},
		{"a TTL over the maximum", acquire("token-a", wire.AcquireRequest{Namespace: "crawl", TTLSeconds: 7200}), http.StatusBadRequest, wire.CodeTTLTooLong, false},
		{"a flow over its length", acquire("token-a", wire.AcquireRequest{Namespace: "crawl", Flow: strings.Repeat("f", 129)}), http.StatusBadRequest, wire.CodeInvalidRequest, false},
		{"a negative wait", acquire("token-a", wire.AcquireRequest{Namespace: "crawl", WaitSeconds: -1}), http.StatusBadRequest, wire.CodeInvalidRequest, false},
		{"granted", acquire("token-a", wire.AcquireRequest{Namespace: "crawl", Target: "a.example", TTLSeconds: 30}), http.StatusOK, "", false},
		{"the only proxy is leased", acquire("token-b", wire.AcquireRequest{Namespace: "crawl"}), http.StatusConflict, wire.CodeNoMatch, false},
		{"an unknown result", report("token-a", "slow", ""), http.StatusBadRequest, wire.CodeInvalidResult, false},
		{"a result over its length", report("token-a", strings.Repeat("r", 65), ""), http.StatusBadRequest, wire.CodeInvalidRequest, false},
		{"another identity's report", report("token-b", "ok", ""), http.StatusForbidden, wire.CodeForbidden, false},
		{"the holder's report", report("token-a", "ok", "a.example"), http.StatusNoContent, "", false},
		{"a report on no lease", unknown(report("token-a", "ok", "")), http.StatusNotFound, wire.CodeUnknownLease, false},
		{"a renewal over the maximum", renew("token-a", 2*time.Hour), http.StatusBadRequest, wire.CodeTTLTooLong, false},
		{"another identity's renewal", renew("token-b", time.Minute), http.StatusForbidden, wire.CodeForbidden, false},
		{"the holder's renewal", renew("token-a", time.Minute), http.StatusOK, "", false},
		{"another identity's release", release("token-b"), http.StatusForbidden, wire.CodeForbidden, false},
		{"the holder's release", release("token-a"), http.StatusNoContent, "", false},
		{"released twice", release("token-a"), http.StatusNoContent, "", false},
		{"a renewal of a released lease", renew("token-a", time.Minute), http.StatusGone, wire.CodeLeaseEnded, false},
		{"a renewal with an unknown token", renew("nope", time.Minute), http.StatusUnauthorized, wire.CodeUnauthorized, false},
		// A lease used for a site other than its target: does its proxy cool there?
		{"granted again", acquire("token-a", wire.AcquireRequest{Namespace: "crawl", Target: "a.example"}), http.StatusOK, "", false},
		{"its proxy does not cool for another site", getFor("token-a", "b.example"), http.StatusOK, "", false},
		{"rate limited there", report("token-a", "rate_limited", "b.example"), http.StatusNoContent, "", false},
		{"its proxy cools for it", getFor("token-a", "b.example"), http.StatusOK, "", true},
		{"nor for its own target", getFor("token-a", "a.example"), http.StatusOK, "", false},
		{"a malformed site", getFor("token-a", "b example"), http.StatusBadRequest, wire.CodeInvalidRequest, false},
		{"another identity's lookup", getFor("token-b", "b.example"), http.StatusForbidden, wire.CodeForbidden, false},
		{"a lookup of no lease", unknown(getFor("token-a", "b.example")), http.StatusNotFound, wire.CodeUnknownLease, false},
		{"released again", release("token-a"), http.StatusNoContent, "", false},
		{"a lookup of a released lease", getFor("token-a", "b.example"), http.StatusGone, wire.CodeLeaseEnded, false},
		{"a lookup with an unknown token", getFor("nope", "b.example"), http.StatusUnauthorized, wire.CodeUnauthorized, false},
	}
	run := func(inProcess bool) (outs []outcome, network int64) {
		api := startLeaseAPI(t)
		l := api.leaser(t, inProcess)
		var leased string
		for _, s := range steps {
			o := s.call(l, &leased)
			// Lease IDs are random: the messages name them.
			if leased != "" {
				o.Message = strings.ReplaceAll(o.Message, leased, "<id>")
			}
			outs = append(outs, o)
		}
		return outs, api.network.Load()
	}
	overNetwork, n := run(false)
	if n != int64(len(steps)) {
		t.Fatalf("with the lease API not in process, %d of %d calls reached it through the network", n, len(steps))
	}
	inProcess, n := run(true)
	if n != 0 {
		t.Errorf("with the lease API in process and serving, %d calls went through the network; want 0", n)
	}
	if diff := cmp.Diff(overNetwork, inProcess); diff != "" {
		t.Errorf("in process vs over the network (-network +in process):\n%s", diff)
	}
	for i, s := range steps {
		if got := overNetwork[i]; got.Status != s.wantStatus || got.Code != s.wantCode || got.Cooling != s.wantCooling {
			t.Errorf("%s: %d %q cooling %v (%s), want %d %q cooling %v", s.name, got.Status, got.Code, got.Cooling, got.Message, s.wantStatus, s.wantCode, s.wantCooling)
		}
	}
	if got := overNetwork[2].MaxTTL; got != 3600 {
		t.Errorf("ttl_too_long carries maxTTLSeconds %d, want 3600", got)
	}
	if got := overNetwork[5]; !got.Leased || got.ProxyURL != "http://127.0.0.1:3128" || got.TTL != 30 {
		t.Errorf("granted lease %+v, want the proxy http://127.0.0.1:3128 for 30 s", got)
	}
	if got := overNetwork[6].NoMatch; got == nil || got.Considered != 1 || got.AtCapacity != 1 {
		t.Errorf("no_match carries %+v, want 1 considered, 1 at capacity", got)
	}
	if got := overNetwork[14]; got.TTL != 60 {
		t.Errorf("renewed lease %+v, want 60 s", got)
	}

	// A replica that stops serving leases sends its calls to the Service.
	api := startLeaseAPI(t)
	l := api.leaser(t, true)
	api.gate.Close()
	got := outcomeOf(l.Acquire(ctx, "token-a", wire.AcquireRequest{Namespace: "crawl"}))
	if api.network.Load() != 1 || got.Status != http.StatusServiceUnavailable || got.Code != wire.CodeNotLeader {
		t.Errorf("not serving: %d calls through the network, answer %+v; want 1 and 503 %s", api.network.Load(), got, wire.CodeNotLeader)
	}
}

// TestSiteBudgetRefusalNamesItsPolicy: both ways to the lease API, a lease
// over a site's budget is refused naming the SitePolicy (the gateway's own
// answer says it: TestErrorAnswers).
func TestSiteBudgetRefusalNamesItsPolicy(t *testing.T) {
	for _, inProcess := range []bool{true, false} {
		api := startLeaseAPI(t)
		api.store.UpsertProxy(lease.ProxyInfo{Namespace: "crawl", Name: "p2", URL: "http://127.0.0.2:3128", Host: "127.0.0.2", Port: 3128, LatencyMillis: 1, Healthy: true})
		api.store.SetSitePolicies([]sites.Policy{{Name: "policed", Sites: []string{"policed.example"}, MinConcurrency: 1, MaxConcurrency: 1,
			IncreaseInterval: time.Minute, DecreaseFactor: 0.8}})
		l := api.leaser(t, inProcess)
		req := wire.AcquireRequest{Namespace: "crawl", Target: "policed.example"}
		if _, err := l.Acquire(context.Background(), "token-a", req); err != nil {
			t.Fatalf("in process %v: the first lease for the site: %v", inProcess, err)
		}
		_, err := l.Acquire(context.Background(), "token-a", req)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.NoMatch == nil || ae.NoMatch.SitePolicy != "policed" || ae.NoMatch.Free != 1 {
			t.Errorf("in process %v: the second lease for the site: %v (%+v), want a no match naming SitePolicy policed with the other proxy free", inProcess, err, ae)
		}
	}
}
