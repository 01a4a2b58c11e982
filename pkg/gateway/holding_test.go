package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

func testLeases(t *testing.T) (*leases, *fakeLeaser, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	f := newFakeLeaser(clk.Now)
	o := DefaultOptions()
	o.MaxSessionsPerToken = 2
	o.MaxInFlight = 3
	o.MaxInFlightPerToken, o.MaxInFlightPerSession = 3, 3
	return newLeases(f, &o, clk.Now), f, clk
}

// eventually waits for the background releases.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 200 {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRequestLeaseReleasedWhenDone(t *testing.T) {
	ls, f, _ := testLeases(t)
	h, done, err := ls.acquire(context.Background(), "tok", "", UsernameOptions{}, "example.com")
	if err != nil {
		t.Fatal(err)
	}
	if h.auth != "Basic dS1sMTpw" { // u-l1:p
		t.Errorf("Proxy-Authorization = %q, want the lease's credentials", h.auth)
	}
	done()
	done() // twice is once
	eventually(t, "the lease released", func() bool { return len(f.liveIDs()) == 0 })
	if n := f.count("release"); n != 1 {
		t.Errorf("%d releases, want 1", n)
	}
}

func TestSessionSticksMovesAndEnds(t *testing.T) {
	ls, f, clk := testLeases(t)
	ctx := context.Background()
	opts := UsernameOptions{Session: "a"}
	h1, done1, err := ls.acquire(ctx, "tok", "session-a", opts, "example.com")
	if err != nil {
		t.Fatal(err)
	}
	h2, done2, err := ls.acquire(ctx, "tok", "session-a", opts, "example.org")
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 || f.count("acquire") != 1 {
		t.Fatalf("a session's second request leased anew (%d acquires)", f.count("acquire"))
	}
	// Another token's session of the same name is another session.
	h3, done3, err := ls.acquire(ctx, "other", "session-a", opts, "example.com")
	if err != nil || h3 == h1 {
		t.Fatalf("another token shared the session: %v", err)
	}
	done3()
	// Cooling for example.com: the next request there moves; the old lease
	// is released once its requests end.
	ls.cool(h1, "example.com")() // reported
	h4, done4, err := ls.acquire(ctx, "tok", "session-a", opts, "example.com")
	if err != nil || h4 == h1 {
		t.Fatalf("the session did not move off a proxy cooling for the host: %v", err)
	}
	if !f.liveIDs()[h1.id] {
		t.Errorf("the old lease was released while requests still use it")
	}
	done1()
	done2()
	eventually(t, "the old lease released", func() bool { return !f.liveIDs()[h1.id] })
	done4()
	// Renewed within half a TTL of its expiry; ended when idle.
	clk.Step(DefaultLeaseTTL / 2)
	ls.tick(ctx)
	if f.count("renew "+h4.id) != 1 {
		t.Errorf("the session's lease was not renewed: %v", f.calls)
	}
	clk.Step(DefaultSessionIdle)
	ls.tick(ctx)
	eventually(t, "the idle session's lease released", func() bool { return len(f.liveIDs()) == 0 })
}

func TestSessionEndsWhenItsLeaseEnded(t *testing.T) {
	ls, f, clk := testLeases(t)
	ctx := context.Background()
	h, done, err := ls.acquire(ctx, "tok", "session-a", UsernameOptions{Session: "a"}, "x")
	if err != nil {
		t.Fatal(err)
	}
	done()
	f.nextErr = &client.APIError{StatusCode: 410, Code: wire.CodeLeaseEnded}
	clk.Step(DefaultLeaseTTL / 2)
	ls.tick(ctx)
	h2, done2, err := ls.acquire(ctx, "tok", "session-a", UsernameOptions{Session: "a"}, "x")
	if err != nil || h2 == h {
		t.Fatalf("the session kept a lease that ended: %v", err)
	}
	done2()
}

func TestBounds(t *testing.T) {
	ls, _, _ := testLeases(t)
	ctx := context.Background()
	var dones []func()
	for _, s := range []string{"a", "b"} {
		_, done, err := ls.acquire(ctx, "tok", "session-"+s, UsernameOptions{Session: s}, "x")
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, done)
	}
	if _, _, err := ls.acquire(ctx, "tok", "session-c", UsernameOptions{Session: "c"}, "x"); !IsBusy(err) {
		t.Errorf("a third session of a token bounded to 2: %v, want busy", err)
	}
	// The bound is per token.
	_, done, err := ls.acquire(ctx, "other", "session-c", UsernameOptions{Session: "c"}, "x")
	if err != nil {
		t.Fatalf("another token's session: %v", err)
	}
	dones = append(dones, done)
	// Three requests in flight, the maximum.
	if _, _, err := ls.acquire(ctx, "tok", "", UsernameOptions{}, "x"); !IsBusy(err) {
		t.Errorf("a fourth request in flight of 3: %v, want busy", err)
	}
	for _, d := range dones {
		d()
	}
	if _, done, err := ls.acquire(ctx, "tok", "", UsernameOptions{}, "x"); err != nil {
		t.Errorf("a request after the others ended: %v", err)
	} else {
		done()
	}
}

// No token, and no session, holds the gateway: one sticky session of one
// token took every in-flight slot, and every other client got 429. By
// default a token has a quarter of --gateway-max-in-flight.
func TestInFlightBoundsPerTokenAndSession(t *testing.T) {
	ctx := context.Background()
	acquireUntilBusy := func(ls *leases, token, session string) (int, error) {
		for n := 0; ; n++ {
			_, _, err := ls.acquire(ctx, token, "session-"+session, UsernameOptions{Session: session}, "x")
			if err != nil || n > 100 {
				return n, err
			}
		}
	}
	for _, tc := range []struct {
		name                           string
		max, perToken, perSession      int
		sessionGets, secondSessionGets int
		busyFlag                       string
	}{
		{name: "the default share of a token", max: 8, perToken: 0, perSession: DefaultMaxInFlightPerSession,
			sessionGets: 2, secondSessionGets: 0, busyFlag: "--gateway-max-in-flight-per-token"},
		{name: "a session's bound", max: 100, perToken: 10, perSession: 4,
			sessionGets: 4, secondSessionGets: 4, busyFlag: "--gateway-max-in-flight-per-session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
			o := DefaultOptions()
			o.MaxInFlight, o.MaxInFlightPerToken, o.MaxInFlightPerSession = tc.max, tc.perToken, tc.perSession
			ls := newLeases(newFakeLeaser(clk.Now), &o, clk.Now)
			n, err := acquireUntilBusy(ls, "tok", "a")
			if n != tc.sessionGets || !IsBusy(err) || !strings.Contains(err.Error(), tc.busyFlag) {
				t.Fatalf("one session: %d in flight, then %v; want %d, then busy naming %s", n, err, tc.sessionGets, tc.busyFlag)
			}
			if n, _ := acquireUntilBusy(ls, "tok", "b"); n != tc.secondSessionGets {
				t.Errorf("the token's second session: %d in flight, want %d", n, tc.secondSessionGets)
			}
			if _, done, err := ls.acquire(ctx, "other", "", UsernameOptions{}, "x"); err != nil {
				t.Errorf("another token while the first is at its bound: %v", err)
			} else {
				done()
			}
		})
	}
}

func TestAcquireErrorsKeepNothing(t *testing.T) {
	ls, f, _ := testLeases(t)
	f.nextErr = &client.APIError{StatusCode: 409, Code: wire.CodeNoMatch, NoMatch: &client.NoMatch{Considered: 2, InCooldown: 2}}
	_, _, err := ls.acquire(context.Background(), "tok", "session-a", UsernameOptions{Session: "a"}, "x")
	if got := gatewayError(err); got.Reason != ReasonBusy || got.RetryAfter != time.Second {
		t.Errorf("no_match became %+v, want busy with Retry-After", got)
	}
	if len(ls.sessions) != 0 || len(ls.perToken) != 0 || ls.inFlight != 0 {
		t.Errorf("a refused session left state: sessions %d, perToken %v, inFlight %d", len(ls.sessions), ls.perToken, ls.inFlight)
	}
}

func TestErrorAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantStatus int
		wantReason string
		wantRetry  string
		// wantWords must be in the message ("": anything).
		wantWords string
	}{
		{"bad token", &client.APIError{StatusCode: 401, Code: wire.CodeUnauthorized}, 407, ReasonUnauthorized, "", ""},
		{"a namespace not the token's", &client.APIError{StatusCode: 403, Code: wire.CodeForbidden, Message: "namespace x"}, 403, ReasonForbidden, "", ""},
		{"a bad selector", &client.APIError{StatusCode: 400, Code: wire.CodeInvalidRequest, Message: "selector: bad"}, 400, ReasonInvalid, "", ""},
		{"everything cools", &client.APIError{StatusCode: 409, Code: wire.CodeNoMatch}, 429, ReasonBusy, "1", ""},
		{"a site's budget in use", &client.APIError{StatusCode: 409, Code: wire.CodeNoMatch, NoMatch: &client.NoMatch{Considered: 2, Free: 2, SitePolicy: "shop"}},
			429, ReasonBusy, "1", `the site's budget (SitePolicy "shop") is in use`},
		{"queue full", &client.APIError{StatusCode: 429, Code: wire.CodeQueueFull, RetryAfter: 7 * time.Second}, 429, ReasonBusy, "7", ""},
		{"a standby", &client.APIError{StatusCode: 503, Code: wire.CodeNotLeader, RetryAfter: 2 * time.Second}, 503, ReasonUnavailable, "2", ""},
		{"the API down", errors.New("dial tcp: connection refused"), 503, ReasonUnavailable, "1", ""},
		{"an upstream failure", &Error{Reason: ReasonUpstream, Message: "proxy said 502"}, 502, ReasonUpstream, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, gatewayError(tc.err), "")
			var b body
			if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			got := []any{rec.Code, b.Error, rec.Header().Get("Retry-After"), b.Message != ""}
			if d := cmp.Diff([]any{tc.wantStatus, tc.wantReason, tc.wantRetry, true}, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if !strings.Contains(b.Message, tc.wantWords) {
				t.Errorf("message %q does not say %q", b.Message, tc.wantWords)
			}
			if (rec.Code == http.StatusProxyAuthRequired) != (rec.Header().Get("Proxy-Authenticate") != "") {
				t.Errorf("Proxy-Authenticate %q on a %d", rec.Header().Get("Proxy-Authenticate"), rec.Code)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	good := DefaultOptions()
	good.Addr, good.LeaseAPIURL = "127.0.0.1:8888", "https://proxy-operator-discovery:8090"
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults with an address and URL: %v", err)
	}
	off := DefaultOptions()
	if err := off.Validate(); err != nil || off.Enabled() {
		t.Fatalf("the default is off and valid: %v", err)
	}
	for name, mod := range map[string]func(*Options){
		"--gateway-bind-address":              func(o *Options) { o.Addr = "nohostport" },
		"--gateway-lease-api-url":             func(o *Options) { o.LeaseAPIURL = "" },
		"--gateway-lease-ttl":                 func(o *Options) { o.LeaseTTL = time.Second },
		"--gateway-report-statuses":           func(o *Options) { o.ReportStatuses = []int{42} },
		"--gateway-max-sessions-per-token":    func(o *Options) { o.MaxSessionsPerToken = 0 },
		"--gateway-max-in-flight-per-token":   func(o *Options) { o.MaxInFlightPerToken = -1 },
		"--gateway-max-in-flight-per-session": func(o *Options) { o.MaxInFlightPerSession = 0 },
		"--gateway-idle-timeout":              func(o *Options) { o.IdleTimeout = 0 },
	} {
		o := good
		mod(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate() = %v, want an error naming it", name, err)
		}
	}
}
