package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/leasing/leasingtest"
)

const (
	token      = "secret-token"
	aliceToken = "alice-token"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type env struct {
	t       *testing.T
	srv     *httptest.Server
	server  *Server
	store   *lease.Store
	clock   *clocktesting.FakeClock
	metrics *fakeMetrics
	lister  *fakeLister
	waiter  *leasingtest.Queue
}

type envOption func(*Options)

func withoutAuth() envOption { return func(o *Options) { o.Tokens = nil } }

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	fc := clocktesting.NewFakeClock(t0)
	n := 0
	store, err := lease.New(lease.Options{
		MaxTTL: time.Hour, DefaultTTL: 5 * time.Minute, CooldownWindow: 10 * time.Minute,
		NewID: func() string { n++; return fmt.Sprintf("lease-%d", n) },
	}, fc)
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "a", Name: "eu-1", URL: "http://10.0.0.1:3128", Host: "10.0.0.1", Port: 3128,
		Attributes: map[string]string{"region": "eu"}, LatencyMillis: 10, Healthy: true})
	store.UpsertProxy(lease.ProxyInfo{Namespace: "a", Name: "us-1", URL: "http://10.0.0.2:3128", Host: "10.0.0.2", Port: 3128,
		Attributes: map[string]string{"region": "us"}, LatencyMillis: 20, Healthy: true})
	store.UpsertProxy(lease.ProxyInfo{Namespace: "b", Name: "eu-2", URL: "http://10.0.0.3:3128", Host: "10.0.0.3", Port: 3128,
		Attributes: map[string]string{"region": "eu"}, LatencyMillis: 5, Healthy: false})
	e := &env{t: t, store: store, clock: fc, metrics: &fakeMetrics{}, lister: &fakeLister{inner: store}}
	e.waiter = &leasingtest.Queue{Store: store}
	o := Options{
		Tokens: Tokens{token: {Identity: DefaultIdentity}, aliceToken: {Identity: "alice"}},
		// The service the operator wires, over a queue the tests steer.
		Service: newService(t, store, e.waiter, fc, e.metrics),
		Lister:  e.lister,
	}
	for _, f := range opts {
		f(&o)
	}
	e.server, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.server.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(method, path, body, auth string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// strictDecode decodes a response body the way a strict client would.
func strictDecode(t *testing.T, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
}

func (e *env) acquire(body string) wire.Lease {
	e.t.Helper()
	r := e.do("POST", "/v1/leases", body, "Bearer "+token)
	if r.status != http.StatusCreated {
		e.t.Fatalf("acquire %s: %d %s", body, r.status, r.body)
	}
	var l wire.Lease
	strictDecode(e.t, r.body, &l)
	return l
}

func intp(i int) *int       { return &i }
func int64p(i int64) *int64 { return &i }

func TestEndpoints(t *testing.T) {
	bearer := "Bearer " + token
	tests := []struct {
		name   string
		opts   []envOption
		setup  func(e *env) string // returns a value substituted for {id} in path
		method string
		path   string
		body   string
		auth   string // "" = the valid token; "-" = none
		// want
		status   int
		code     string      // error code, if an error body is expected
		wantErr  *wire.Error // full error body, when the exact body matters
		header   map[string]string
		check    func(t *testing.T, e *env, r response)
		outcomes []string
	}{
		// /healthz
		{name: "healthz without token", method: "GET", path: "/healthz", auth: "-", status: 200,
			check: func(t *testing.T, e *env, r response) {
				var h wire.Health
				strictDecode(t, r.body, &h)
				if h.Status != "ok" {
					t.Errorf("status %q", h.Status)
				}
			}},
		{name: "healthz ignores a wrong token", method: "GET", path: "/healthz", auth: "Bearer nope", status: 200},

		// auth
		{name: "no token", method: "GET", path: "/v1/proxies", auth: "-", status: 401, code: wire.CodeUnauthorized,
			header: map[string]string{"WWW-Authenticate": `Bearer realm="proxy-operator"`}},
		{name: "wrong token", method: "GET", path: "/v1/proxies", auth: "Bearer nope", status: 401, code: wire.CodeUnauthorized},
		{name: "token prefix is not the token", method: "GET", path: "/v1/proxies", auth: "Bearer secret", status: 401, code: wire.CodeUnauthorized},
		{name: "basic scheme", method: "GET", path: "/v1/proxies", auth: "Basic " + token, status: 401, code: wire.CodeUnauthorized},
		{name: "empty bearer", method: "GET", path: "/v1/proxies", auth: "Bearer ", status: 401, code: wire.CodeUnauthorized},
		{name: "scheme is case-insensitive", method: "GET", path: "/v1/proxies", auth: "bearer " + token, status: 200},
		{name: "auth off needs no token", opts: []envOption{withoutAuth()}, method: "GET", path: "/v1/proxies", auth: "-", status: 200},
		{name: "openapi needs the token", method: "GET", path: "/openapi.json", auth: "-", status: 401, code: wire.CodeUnauthorized},

		// GET /v1/proxies
		{name: "list all", method: "GET", path: "/v1/proxies", status: 200,
			setup: func(e *env) string { e.acquire(`{"selector":{"region":"us"}}`); return "" },
			check: func(t *testing.T, e *env, r response) {
				var got wire.ProxyList
				strictDecode(t, r.body, &got)
				want := wire.ProxyList{Count: 3, Proxies: []wire.ListedProxy{
					{Proxy: wire.Proxy{Name: "eu-1", Namespace: "a", URL: "http://10.0.0.1:3128", Host: "10.0.0.1", Port: 3128, Attributes: map[string]string{"region": "eu"}, LatencyMillis: 10}, Healthy: true},
					{Proxy: wire.Proxy{Name: "us-1", Namespace: "a", URL: "http://10.0.0.2:3128", Host: "10.0.0.2", Port: 3128, Attributes: map[string]string{"region": "us"}, LatencyMillis: 20}, Healthy: true, ActiveLeases: 1},
					{Proxy: wire.Proxy{Name: "eu-2", Namespace: "b", URL: "http://10.0.0.3:3128", Host: "10.0.0.3", Port: 3128, Attributes: map[string]string{"region": "eu"}, LatencyMillis: 5}, Healthy: false},
				}}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("list (-want +got):\n%s", diff)
				}
			}},
		{name: "list by attribute", method: "GET", path: "/v1/proxies?attr.region=eu", status: 200, check: names("a/eu-1", "b/eu-2")},
		{name: "list healthy", method: "GET", path: "/v1/proxies?attr.region=eu&healthy=true", status: 200, check: names("a/eu-1")},
		{name: "list unhealthy", method: "GET", path: "/v1/proxies?healthy=false", status: 200, check: names("b/eu-2")},
		{name: "list namespace", method: "GET", path: "/v1/proxies?namespace=b", status: 200, check: names("b/eu-2")},
		{name: "empty list is 200", method: "GET", path: "/v1/proxies?attr.region=mars", status: 200,
			check: func(t *testing.T, e *env, r response) {
				if got := strings.TrimSpace(string(r.body)); got != `{"proxies":[],"count":0}` {
					t.Errorf("body %s", got)
				}
			}},
		{name: "unknown parameter", method: "GET", path: "/v1/proxies?colour=red", status: 400, code: wire.CodeInvalidQuery},
		{name: "bad healthy", method: "GET", path: "/v1/proxies?healthy=maybe", status: 400, code: wire.CodeInvalidQuery},
		{name: "repeated attribute", method: "GET", path: "/v1/proxies?attr.region=eu&attr.region=us", status: 400, code: wire.CodeInvalidQuery},
		{name: "empty attribute name", method: "GET", path: "/v1/proxies?attr.=x", status: 400, code: wire.CodeInvalidQuery},
		{name: "bad namespace", method: "GET", path: "/v1/proxies?namespace=Not_A_Label", status: 400, code: wire.CodeInvalidQuery},
		{name: "malformed query", method: "GET", path: "/v1/proxies?attr.region=%zz", status: 400, code: wire.CodeInvalidQuery},
		{name: "a lease query other than target", method: "GET", path: "/v1/leases/x?site=a.example", status: 400, code: wire.CodeInvalidQuery},
		{name: "a lease query with target twice", method: "GET", path: "/v1/leases/x?target=a.example&target=b.example", status: 400, code: wire.CodeInvalidQuery},
		{name: "lister fails", method: "GET", path: "/v1/proxies", status: 503, code: wire.CodeUnavailable,
			setup: func(e *env) string { e.lister.nextErr = errors.New("cache not synced"); return "" }},
		{name: "handler panic is a JSON 500", method: "GET", path: "/v1/proxies", status: 500, code: wire.CodeInternal,
			setup: func(e *env) string { e.lister.nextPanic = true; return "" }},

		// POST /v1/leases
		{name: "acquire with defaults", method: "POST", path: "/v1/leases", body: `{}`, status: 201,
			header: map[string]string{"Location": "/v1/leases/lease-1"}, outcomes: []string{leasing.OutcomeGranted},
			check: func(t *testing.T, e *env, r response) {
				var got wire.Lease
				strictDecode(t, r.body, &got)
				want := wire.Lease{LeaseID: "lease-1", TTLSeconds: 300, ExpiresAt: t0.Add(5 * time.Minute), ProxyHealthy: true,
					Proxy: wire.Proxy{Name: "eu-1", Namespace: "a", URL: "http://10.0.0.1:3128", Host: "10.0.0.1", Port: 3128, Attributes: map[string]string{"region": "eu"}, LatencyMillis: 10}}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("lease (-want +got):\n%s", diff)
				}
				l, ok := e.store.Get("lease-1")
				if !ok || l.Holder != "http:discovery" || l.Flow != "http:discovery" {
					t.Errorf("stored lease %+v", l)
				}
			}},
		{name: "acquire with an empty body", method: "POST", path: "/v1/leases", status: 201, outcomes: []string{leasing.OutcomeGranted}},
		{name: "acquire by selector, target, ttl, flow", method: "POST", path: "/v1/leases", status: 201, outcomes: []string{leasing.OutcomeGranted},
			body: `{"selector":{"region":"us"},"namespace":"a","target":"example.com","ttlSeconds":60,"flow":"batch"}`, auth: "Bearer " + aliceToken,
			check: func(t *testing.T, e *env, r response) {
				var got wire.Lease
				strictDecode(t, r.body, &got)
				if got.Proxy.Name != "us-1" || got.TTLSeconds != 60 || !got.ExpiresAt.Equal(t0.Add(time.Minute)) {
					t.Errorf("lease %+v", got)
				}
				l, _ := e.store.Get(got.LeaseID)
				if l.Holder != "http:alice" || l.Flow != "http:alice/batch" || l.Target != "example.com" {
					t.Errorf("stored lease holder %q flow %q target %q", l.Holder, l.Flow, l.Target)
				}
			}},
		{name: "auth off: anonymous holder", opts: []envOption{withoutAuth()}, method: "POST", path: "/v1/leases", body: `{}`, auth: "-", status: 201,
			check: func(t *testing.T, e *env, r response) {
				if l, _ := e.store.Get("lease-1"); l.Holder != "http:anonymous" {
					t.Errorf("holder %q", l.Holder)
				}
			}},
		{name: "ttl over the maximum", method: "POST", path: "/v1/leases", body: `{"ttlSeconds":7200}`, status: 400,
			wantErr:  &wire.Error{Error: wire.CodeTTLTooLong, Message: "ttlSeconds: Invalid value: 7200: exceeds the maximum 3600 (--max-lease-ttl=1h0m0s)", MaxTTLSeconds: int64p(3600)},
			outcomes: []string{leasing.OutcomeBadRequest}},
		{name: "huge ttl", method: "POST", path: "/v1/leases", body: `{"ttlSeconds":9223372036854775807}`, status: 400, code: wire.CodeTTLTooLong},
		{name: "negative ttl", method: "POST", path: "/v1/leases", body: `{"ttlSeconds":-1}`, status: 400, code: wire.CodeInvalidRequest},
		{name: "negative wait", method: "POST", path: "/v1/leases", body: `{"waitSeconds":-5}`, status: 400, code: wire.CodeInvalidRequest},
		{name: "wait over the maximum", method: "POST", path: "/v1/leases", body: `{"waitSeconds":301}`, status: 400, code: wire.CodeInvalidRequest},
		{name: "unknown field", method: "POST", path: "/v1/leases", body: `{"ttl":5}`, status: 400,
			wantErr: &wire.Error{Error: wire.CodeInvalidJSON, Message: `unknown field "ttl"`}, outcomes: []string{leasing.OutcomeBadRequest}},
		{name: "trailing data", method: "POST", path: "/v1/leases", body: `{} {}`, status: 400, code: wire.CodeInvalidJSON},
		{name: "not an object", method: "POST", path: "/v1/leases", body: `[]`, status: 400, code: wire.CodeInvalidJSON},
		{name: "null", method: "POST", path: "/v1/leases", body: `null`, status: 400, code: wire.CodeInvalidJSON},
		{name: "wrong type", method: "POST", path: "/v1/leases", body: `{"ttlSeconds":"300"}`, status: 400, code: wire.CodeInvalidJSON},
		{name: "fractional ttl", method: "POST", path: "/v1/leases", body: `{"ttlSeconds":1.5}`, status: 400, code: wire.CodeInvalidJSON},
		{name: "truncated", method: "POST", path: "/v1/leases", body: `{"ttlSeconds":`, status: 400, code: wire.CodeInvalidJSON},
		{name: "bad namespace", method: "POST", path: "/v1/leases", body: `{"namespace":"Bad/NS"}`, status: 400, code: wire.CodeInvalidRequest},
		{name: "empty selector key", method: "POST", path: "/v1/leases", body: `{"selector":{"":"x"}}`, status: 400, code: wire.CodeInvalidRequest},
		{name: "control characters in target", method: "POST", path: "/v1/leases", body: `{"target":"a\u0000b"}`, status: 400, code: wire.CodeInvalidRequest},
		{name: "too many selector pairs", method: "POST", path: "/v1/leases", body: manyPairs(33), status: 400, code: wire.CodeInvalidRequest},
		{name: "no match: unknown attribute", method: "POST", path: "/v1/leases", body: `{"selector":{"region":"mars"}}`, status: 409,
			wantErr:  &wire.Error{Error: wire.CodeNoMatch, Message: "no proxy can take this lease now", Considered: intp(0), AtCapacity: intp(0), InCooldown: intp(0), Unhealthy: intp(0), Free: intp(0), QueuedAhead: intp(0)},
			outcomes: []string{leasing.OutcomeNoMatch}},
		{name: "no match: additive counts", method: "POST", path: "/v1/leases", body: `{"selector":{"region":"eu"},"target":"t"}`, status: 409,
			setup: func(e *env) string {
				e.acquire(`{"selector":{"region":"eu"}}`) // a/eu-1 busy; b/eu-2 unhealthy
				return ""
			},
			wantErr:  &wire.Error{Error: wire.CodeNoMatch, Message: "no proxy can take this lease now", Considered: intp(2), AtCapacity: intp(1), InCooldown: intp(0), Unhealthy: intp(1), Free: intp(0), QueuedAhead: intp(0)},
			outcomes: []string{leasing.OutcomeGranted, leasing.OutcomeNoMatch}},
		{name: "no match: cooldown counted", method: "POST", path: "/v1/leases", body: `{"namespace":"a","selector":{"region":"eu"},"target":"t"}`, status: 409,
			setup: func(e *env) string {
				l := e.acquire(`{"namespace":"a","selector":{"region":"eu"},"target":"t"}`)
				e.do("POST", "/v1/leases/"+l.LeaseID+"/report", `{"result":"banned"}`, bearer)
				e.do("DELETE", "/v1/leases/"+l.LeaseID, "", bearer)
				return ""
			},
			wantErr:  &wire.Error{Error: wire.CodeNoMatch, Message: "no proxy can take this lease now", Considered: intp(1), AtCapacity: intp(0), InCooldown: intp(1), Unhealthy: intp(0), Free: intp(0), QueuedAhead: intp(0)},
			outcomes: []string{leasing.OutcomeGranted, leasing.OutcomeNoMatch}},
		{name: "body over 64 KiB", method: "POST", path: "/v1/leases", body: `{"target":"` + strings.Repeat("x", 70000) + `"}`, status: 413, code: wire.CodeBodyTooLarge},
		{name: "body over 64 KiB, unauthenticated: limit comes first", method: "POST", path: "/v1/leases", auth: "-",
			body: `{"target":"` + strings.Repeat("x", 70000) + `"}`, status: 413, code: wire.CodeBodyTooLarge},

		// waiting
		{name: "wait goes through the waiter", method: "POST", path: "/v1/leases", body: `{"waitSeconds":30,"priority":2,"flow":"f"}`, status: 201,
			outcomes: []string{leasing.OutcomeGranted},
			check: func(t *testing.T, e *env, r response) {
				want := []leasingtest.Call{{
					Req:      lease.AcquireRequest{TTL: 0, Holder: "http:discovery", Flow: "http:discovery/f"},
					Priority: 2, Deadline: t0.Add(30 * time.Second),
				}}
				if diff := cmp.Diff(want, e.waiter.Calls()); diff != "" {
					t.Errorf("waiter calls (-want +got):\n%s", diff)
				}
			}},
		{name: "no wait goes through the waiter with a deadline of now (no fairness bypass)", method: "POST", path: "/v1/leases", body: `{}`, status: 201,
			check: func(t *testing.T, e *env, r response) {
				if calls := e.waiter.Calls(); len(calls) != 1 || !calls[0].Deadline.Equal(t0) {
					t.Errorf("waiter calls %+v, want one with deadline %s", calls, t0)
				}
			}},
		{name: "queue full is 429 with Retry-After", method: "POST", path: "/v1/leases", body: `{"waitSeconds":30}`, status: 429, code: wire.CodeQueueFull,
			setup: func(e *env) string {
				e.waiter.Next(&leasing.Error{Reason: leasing.ReasonQueueFull, RetryAfter: 2500 * time.Millisecond, Cause: errors.New("flow queue limit reached")})
				return ""
			},
			header:   map[string]string{"Retry-After": "3"},
			outcomes: []string{leasing.OutcomeRejected}},
		{name: "wait deadline is 409 with the waiter's counts", method: "POST", path: "/v1/leases", body: `{"waitSeconds":30}`, status: 409,
			setup: func(e *env) string {
				e.waiter.Next(&leasing.Error{Reason: leasing.ReasonNoMatch, Counts: leasing.NoMatchCounts{Considered: 2, AtCapacity: 2}})
				return ""
			},
			wantErr:  &wire.Error{Error: wire.CodeNoMatch, Message: "no proxy can take this lease now", Considered: intp(2), AtCapacity: intp(2), InCooldown: intp(0), Unhealthy: intp(0), Free: intp(0), QueuedAhead: intp(0)},
			outcomes: []string{leasing.OutcomeNoMatch}},
		{name: "queue shutting down is 503", method: "POST", path: "/v1/leases", body: `{"waitSeconds":30}`, status: 503, code: wire.CodeUnavailable,
			setup: func(e *env) string {
				e.waiter.Next(&leasing.Error{Reason: leasing.ReasonShuttingDown, Cause: leasing.ErrShuttingDown})
				return ""
			},
			outcomes: []string{leasing.OutcomeError}},
		{name: "an unexpected queue error is 500, logged", method: "POST", path: "/v1/leases", body: `{}`, status: 500, code: wire.CodeInternal,
			setup: func(e *env) string {
				e.waiter.Next(leasing.FromStore(errors.New("a bug")))
				return ""
			},
			outcomes: []string{leasing.OutcomeError}},

		// DELETE /v1/leases/{id}
		{name: "release", method: "DELETE", path: "/v1/leases/{id}", status: 204,
			setup: func(e *env) string { return e.acquire(`{}`).LeaseID },
			check: func(t *testing.T, e *env, r response) {
				if e.store.Active() != 0 || len(r.body) != 0 {
					t.Errorf("after release: %d active, body %q", e.store.Active(), r.body)
				}
			}},
		{name: "release twice", method: "DELETE", path: "/v1/leases/{id}", status: 204,
			setup: func(e *env) string {
				id := e.acquire(`{}`).LeaseID
				e.do("DELETE", "/v1/leases/"+id, "", bearer)
				return id
			}},
		{name: "release unknown", method: "DELETE", path: "/v1/leases/nope", status: 204},
		{name: "release needs the token", method: "DELETE", path: "/v1/leases/nope", auth: "-", status: 401, code: wire.CodeUnauthorized},

		// POST /v1/leases/{id}/report
		{name: "report ok", method: "POST", path: "/v1/leases/{id}/report", body: `{"result":"ok"}`, status: 204,
			setup: func(e *env) string { return e.acquire(`{}`).LeaseID }},
		{name: "report rate_limited cools the pair", method: "POST", path: "/v1/leases/{id}/report", body: `{"result":"rate_limited","target":"example.com"}`, status: 204,
			setup: func(e *env) string { return e.acquire(`{"namespace":"a","selector":{"region":"eu"}}`).LeaseID },
			check: func(t *testing.T, e *env, r response) {
				e.store.Release("lease-1")
				if _, err := e.store.Acquire(lease.AcquireRequest{Namespace: "a", Selector: map[string]string{"region": "eu"}, Target: "example.com"}); !lease.IsNoMatch(err) {
					t.Errorf("cooling pair granted: %v", err)
				}
			}},
		{name: "report after release, within the window", method: "POST", path: "/v1/leases/{id}/report", body: `{"result":"banned","target":"site.example"}`, status: 204,
			setup: func(e *env) string {
				id := e.acquire(`{}`).LeaseID
				e.do("DELETE", "/v1/leases/"+id, "", bearer)
				e.clock.Step(9 * time.Minute)
				return id
			}},
		{name: "report after the window", method: "POST", path: "/v1/leases/{id}/report", body: `{"result":"ok"}`, status: 404, code: wire.CodeUnknownLease,
			setup: func(e *env) string {
				id := e.acquire(`{"ttlSeconds":60}`).LeaseID
				e.clock.Step(11 * time.Minute)
				return id
			}},
		{name: "report invalid result", method: "POST", path: "/v1/leases/{id}/report", body: `{"result":"meh"}`, status: 400,
			setup:   func(e *env) string { return e.acquire(`{}`).LeaseID },
			wantErr: &wire.Error{Error: wire.CodeInvalidResult, Message: `result "meh" is not one of ok, rate_limited, banned`}},
		{name: "report missing result", method: "POST", path: "/v1/leases/{id}/report", body: `{}`, status: 400, code: wire.CodeInvalidResult,
			setup: func(e *env) string { return e.acquire(`{}`).LeaseID }},
		{name: "report unknown lease", method: "POST", path: "/v1/leases/nope/report", body: `{"result":"ok"}`, status: 404, code: wire.CodeUnknownLease},
		{name: "report unknown field", method: "POST", path: "/v1/leases/nope/report", body: `{"result":"ok","why":"x"}`, status: 400, code: wire.CodeInvalidJSON},
		{name: "report empty body", method: "POST", path: "/v1/leases/nope/report", status: 400, code: wire.CodeInvalidJSON},
		{name: "report body over 64 KiB", method: "POST", path: "/v1/leases/nope/report", body: `{"result":"` + strings.Repeat("x", 70000) + `"}`, status: 413, code: wire.CodeBodyTooLarge},

		// POST /v1/leases/{id}/renew
		{name: "renew", method: "POST", path: "/v1/leases/{id}/renew", body: `{"ttlSeconds":1800}`, status: 200,
			setup: func(e *env) string {
				id := e.acquire(`{"ttlSeconds":60}`).LeaseID
				e.clock.Step(30 * time.Second)
				return id
			},
			check: func(t *testing.T, e *env, r response) {
				var got wire.Lease
				strictDecode(t, r.body, &got)
				if got.TTLSeconds != 1800 || !got.ExpiresAt.Equal(t0.Add(30*time.Second+30*time.Minute)) {
					t.Errorf("renewed lease %+v", got)
				}
			}},
		{name: "renew with an empty body keeps the TTL", method: "POST", path: "/v1/leases/{id}/renew", status: 200,
			setup: func(e *env) string {
				id := e.acquire(`{"ttlSeconds":60}`).LeaseID
				e.clock.Step(30 * time.Second)
				return id
			},
			check: func(t *testing.T, e *env, r response) {
				var got wire.Lease
				strictDecode(t, r.body, &got)
				if got.TTLSeconds != 60 || !got.ExpiresAt.Equal(t0.Add(90*time.Second)) {
					t.Errorf("renewed lease %+v", got)
				}
			}},
		{name: "renew over the maximum", method: "POST", path: "/v1/leases/{id}/renew", body: `{"ttlSeconds":3601}`, status: 400, code: wire.CodeTTLTooLong,
			setup: func(e *env) string { return e.acquire(`{}`).LeaseID }},
		{name: "renew negative", method: "POST", path: "/v1/leases/{id}/renew", body: `{"ttlSeconds":-1}`, status: 400, code: wire.CodeInvalidRequest,
			setup: func(e *env) string { return e.acquire(`{}`).LeaseID }},
		{name: "renew unknown", method: "POST", path: "/v1/leases/nope/renew", body: `{}`, status: 404, code: wire.CodeUnknownLease},
		{name: "renew released", method: "POST", path: "/v1/leases/{id}/renew", body: `{}`, status: 410, code: wire.CodeLeaseEnded,
			setup: func(e *env) string {
				id := e.acquire(`{}`).LeaseID
				e.do("DELETE", "/v1/leases/"+id, "", bearer)
				return id
			}},
		{name: "renew expired", method: "POST", path: "/v1/leases/{id}/renew", body: `{}`, status: 410, code: wire.CodeLeaseEnded,
			setup: func(e *env) string {
				id := e.acquire(`{"ttlSeconds":60}`).LeaseID
				e.clock.Step(time.Minute)
				return id
			}},
		{name: "renew unknown field", method: "POST", path: "/v1/leases/nope/renew", body: `{"ttl":1}`, status: 400, code: wire.CodeInvalidJSON},

		// routing
		{name: "unknown route", method: "GET", path: "/v2/things", status: 404, code: wire.CodeNotFound},
		{name: "wrong method", method: "GET", path: "/v1/leases", status: 405, code: wire.CodeMethodNotAllowed,
			header: map[string]string{"Allow": "POST"}},
		{name: "wrong method on a lease", method: "PUT", path: "/v1/leases/x", status: 405, code: wire.CodeMethodNotAllowed,
			header: map[string]string{"Allow": "DELETE, GET, HEAD"}},
		{name: "openapi", method: "GET", path: "/openapi.json", status: 200,
			check: func(t *testing.T, e *env, r response) {
				if !bytes.Equal(r.body, openAPIDocument) || r.header.Get("Content-Type") != "application/json" {
					t.Errorf("openapi body/content type wrong: %q", r.header.Get("Content-Type"))
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts...)
			path := tc.path
			if tc.setup != nil {
				if id := tc.setup(e); id != "" {
					path = strings.ReplaceAll(path, "{id}", id)
				}
			}
			auth := tc.auth
			switch auth {
			case "":
				auth = bearer
			case "-":
				auth = ""
			}
			r := e.do(tc.method, path, tc.body, auth)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tc.status, r.body)
			}
			if tc.status >= 400 {
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("error Content-Type %q", ct)
				}
				var got wire.Error
				strictDecode(t, r.body, &got)
				if got.Message == "" {
					t.Errorf("error without a message: %s", r.body)
				}
				if tc.code != "" && got.Error != tc.code {
					t.Errorf("error code %q, want %q (%s)", got.Error, tc.code, got.Message)
				}
				if tc.wantErr != nil {
					if diff := cmp.Diff(*tc.wantErr, got); diff != "" {
						t.Errorf("error body (-want +got):\n%s", diff)
					}
				}
			}
			for k, v := range tc.header {
				if got := r.header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if tc.check != nil {
				tc.check(t, e, r)
			}
			if tc.outcomes != nil {
				if diff := cmp.Diff(tc.outcomes, e.metrics.take()); diff != "" {
					t.Errorf("metric outcomes (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func names(want ...string) func(t *testing.T, e *env, r response) {
	return func(t *testing.T, e *env, r response) {
		var got wire.ProxyList
		strictDecode(t, r.body, &got)
		var gotNames []string
		for _, p := range got.Proxies {
			gotNames = append(gotNames, p.Namespace+"/"+p.Name)
		}
		if diff := cmp.Diff(want, gotNames); diff != "" || got.Count != len(want) {
			t.Errorf("proxies (-want +got):\n%s (count %d)", diff, got.Count)
		}
	}
}

func manyPairs(n int) string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	b, _ := json.Marshal(wire.AcquireRequest{Selector: m})
	return string(b)
}

// A chunked body (no Content-Length) over the limit is cut by MaxBytesReader.
func TestChunkedBodyOverLimit(t *testing.T) {
	e := newEnv(t)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte(`{"target":"` + strings.Repeat("x", 70000) + `"}`))
		_ = pw.Close()
	}()
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/leases", pr)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got wire.Error
	data, _ := io.ReadAll(resp.Body)
	strictDecode(t, data, &got)
	if resp.StatusCode != 413 || got.Error != wire.CodeBodyTooLarge {
		t.Errorf("chunked oversize: %d %+v", resp.StatusCode, got)
	}
}

// A client that leaves while its request waits must not leak the lease the
// waiter grants afterwards.
func TestCancelledWaitReleasesLateGrant(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("POST", "/v1/leases", strings.NewReader(`{"waitSeconds":30}`)).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+token)
	e.server.opts.Service = newService(t, e.store, waiterFunc(func(ctx context.Context, r lease.AcquireRequest, _ int, _ time.Time) (*lease.Lease, error) {
		l, err := e.store.Acquire(r)
		if err != nil {
			t.Fatal(err)
		}
		cancel() // the client goes away right after the grant
		return l, nil
	}), e.clock, e.metrics)
	rec := httptest.NewRecorder()
	e.server.Handler().ServeHTTP(rec, req)
	if n := e.store.Active(); n != 0 {
		t.Errorf("%d leases left after the client left", n)
	}
	if diff := cmp.Diff([]string{leasing.OutcomeCancelled}, e.metrics.take()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

type waiterFunc func(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error)

func (f waiterFunc) Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*lease.Lease, error) {
	return f(ctx, req, priority, deadline)
}

func TestNewValidates(t *testing.T) {
	store, _ := lease.New(lease.Options{}, nil)
	tests := []struct {
		name string
		opts Options
	}{
		{"no service", Options{Lister: store}},
		{"empty token", Options{Service: realService(t, store), Tokens: Tokens{"": {Identity: "x"}}}},
		{"empty identity", Options{Service: realService(t, store), Tokens: Tokens{"t": {}}}},
	}
	for _, tc := range tests {
		if _, err := New(tc.opts); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if got := SingleToken("abc"); !cmp.Equal(got, Tokens{"abc": {Identity: "discovery"}}) {
		t.Errorf("SingleToken = %v", got)
	}
	if SingleToken("") != nil {
		t.Error("SingleToken(\"\") should disable auth")
	}
}

// Only the holder changes a lease over HTTP: another token's identity gets
// 403 forbidden with a JSON body on release, report and renew, and the lease
// stays exactly as it was; the holder's own calls work.
func TestOnlyTheHolderChangesALease(t *testing.T) {
	e := newEnv(t)
	l := e.acquire(`{"selector":{"region":"eu"},"ttlSeconds":60,"target":"example.com"}`)
	before, ok := e.store.Get(l.LeaseID)
	if !ok {
		t.Fatal("the lease is not live")
	}
	alice := "Bearer " + aliceToken
	for _, c := range []struct{ method, path, body string }{
		{"DELETE", "/v1/leases/" + l.LeaseID, ""},
		{"POST", "/v1/leases/" + l.LeaseID + "/report", `{"result":"banned"}`},
		{"POST", "/v1/leases/" + l.LeaseID + "/renew", `{"ttlSeconds":600}`},
	} {
		r := e.do(c.method, c.path, c.body, alice)
		var body wire.Error
		strictDecode(t, r.body, &body)
		if r.status != http.StatusForbidden || body.Error != wire.CodeForbidden || !strings.Contains(body.Message, l.LeaseID) {
			t.Errorf("%s %s as another identity = %d %+v; want 403 forbidden naming the lease", c.method, c.path, r.status, body)
		}
	}
	after, ok := e.store.Get(l.LeaseID)
	if !ok || !after.ExpiresAt.Equal(before.ExpiresAt) || after.LastResult != "" {
		t.Fatalf("after another identity's calls the lease is %+v (live %v); want it untouched", after, ok)
	}

	// Negative control: the holder's token does the same calls.
	own := "Bearer " + token
	if r := e.do("POST", "/v1/leases/"+l.LeaseID+"/report", `{"result":"ok"}`, own); r.status != http.StatusNoContent {
		t.Errorf("report by the holder = %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/leases/"+l.LeaseID+"/renew", `{"ttlSeconds":600}`, own); r.status != http.StatusOK {
		t.Errorf("renew by the holder = %d %s", r.status, r.body)
	}
	if r := e.do("DELETE", "/v1/leases/"+l.LeaseID, "", own); r.status != http.StatusNoContent {
		t.Errorf("release by the holder = %d %s", r.status, r.body)
	}
	if _, ok := e.store.Get(l.LeaseID); ok {
		t.Error("the holder's release left the lease live")
	}
	// Released: another identity's release of it is the idempotent 204 of
	// a lease that is gone (it frees nothing).
	if r := e.do("DELETE", "/v1/leases/"+l.LeaseID, "", alice); r.status != http.StatusNoContent {
		t.Errorf("release of an ended lease by another identity = %d %s, want 204", r.status, r.body)
	}
}

// A lease follows its proxy: GET /v1/leases/{id} shows a replaced
// instance's new address and the proxy's health, to its holder only; once
// the Proxy is deleted the lease is 410 with the reason, on GET and renew.
func TestLeaseFollowsItsProxy(t *testing.T) {
	e := newEnv(t)
	l := e.acquire(`{"selector":{"region":"us"},"ttlSeconds":60}`)
	own := "Bearer " + token
	get := func() (int, wire.Lease, wire.Error) {
		r := e.do("GET", "/v1/leases/"+l.LeaseID, "", own)
		var wl wire.Lease
		var we wire.Error
		if r.status == http.StatusOK {
			strictDecode(t, r.body, &wl)
		} else {
			strictDecode(t, r.body, &we)
		}
		return r.status, wl, we
	}
	if code, got, _ := get(); code != http.StatusOK || got.Proxy.URL != "http://10.0.0.2:3128" || !got.ProxyHealthy {
		t.Fatalf("GET of a fresh lease = %d %+v", code, got)
	}
	// The instance is replaced (new address), then turns unhealthy.
	e.store.UpsertProxy(lease.ProxyInfo{Namespace: "a", Name: "us-1", URL: "http://10.0.0.9:3128", Host: "10.0.0.9", Port: 3128,
		Attributes: map[string]string{"region": "us"}, LatencyMillis: 20, Healthy: false})
	code, got, _ := get()
	if code != http.StatusOK || got.Proxy.URL != "http://10.0.0.9:3128" || got.Proxy.Host != "10.0.0.9" || got.ProxyHealthy {
		t.Errorf("GET after the replacement and a failed probe = %d %+v; want the new address, proxyHealthy false", code, got)
	}
	if r := e.do("GET", "/v1/leases/"+l.LeaseID, "", "Bearer "+aliceToken); r.status != http.StatusForbidden {
		t.Errorf("GET by another identity = %d %s, want 403", r.status, r.body)
	}
	if r := e.do("GET", "/v1/leases/nope", "", own); r.status != http.StatusNotFound {
		t.Errorf("GET of an unknown lease = %d %s, want 404", r.status, r.body)
	}
	e.store.RemoveProxy(lease.ProxyKey{Namespace: "a", Name: "us-1"})
	code, _, we := get()
	if code != http.StatusGone || we.Error != wire.CodeLeaseEnded || !strings.Contains(we.Message, "proxy was deleted") {
		t.Errorf("GET after the Proxy was deleted = %d %+v; want 410 lease_ended saying the proxy was deleted", code, we)
	}
	r := e.do("POST", "/v1/leases/"+l.LeaseID+"/renew", `{}`, own)
	if r.status != http.StatusGone || !strings.Contains(string(r.body), "proxy was deleted") {
		t.Errorf("renew after the Proxy was deleted = %d %s; want 410 saying why", r.status, r.body)
	}
}
