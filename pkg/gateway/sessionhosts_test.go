package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A session's lease is checked against cooldowns, when granted, for the
// host of its first request only; before the session uses it for another
// host the gateway asks the lease API, once per host, and moves when the
// proxy cools there. (The bug a browser showed: a session begun for a
// browser's own background host got the proxy that cooled for the site,
// and took the site's next page through it.)
func TestSessionChecksEachNewHost(t *testing.T) {
	for _, tc := range []struct {
		name string
		// coolFor: where the lease API says every proxy cools.
		coolFor string
		// getErr fails the lease API's answer about the lease.
		getErr error
		// then are the hosts of the session's next requests.
		then []string
		// wantCalls after the first request (to background.example).
		wantCalls []string
		wantMoved bool
	}{{
		name:      "a host the proxy cools for: the session moves",
		coolFor:   "site.example",
		then:      []string{"site.example"},
		wantCalls: []string{"get l1 site.example", "acquire tok site.example"},
		wantMoved: true,
	}, {
		name:      "a host it does not cool for: asked once, the lease kept",
		coolFor:   "elsewhere.example",
		then:      []string{"site.example", "site.example", "background.example"},
		wantCalls: []string{"get l1 site.example"},
	}, {
		name:      "no clear answer: the session moves, its new lease checked as granted",
		getErr:    errors.New("the lease API is unreachable"),
		then:      []string{"site.example", "site.example"},
		wantCalls: []string{"get l1 site.example", "acquire tok site.example"},
		wantMoved: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ls, f, _ := testLeases(t)
			ctx := context.Background()
			opts := UsernameOptions{Session: "s"}
			first, done, err := ls.acquire(ctx, "tok", "session-s", opts, "background.example")
			if err != nil {
				t.Fatal(err)
			}
			done()
			if tc.coolFor != "" {
				f.coolFor(tc.coolFor)
			}
			f.mu.Lock()
			f.calls, f.nextErr = nil, tc.getErr
			f.mu.Unlock()
			var last *holding
			for _, host := range tc.then {
				h, done, err := ls.acquire(ctx, "tok", "session-s", opts, host)
				if err != nil {
					t.Fatalf("request for %s: %v", host, err)
				}
				done()
				last = h
			}
			var calls []string // but the releases, made in the background
			f.mu.Lock()
			for _, c := range f.calls {
				if !strings.HasPrefix(c, "release ") {
					calls = append(calls, c)
				}
			}
			f.mu.Unlock()
			if d := cmp.Diff(tc.wantCalls, calls); d != "" {
				t.Errorf("calls to the lease API (-want +got):\n%s", d)
			}
			if moved := last != first; moved != tc.wantMoved {
				t.Errorf("session moved: %v, want %v", moved, tc.wantMoved)
			}
		})
	}
}

// A client that leaves while the gateway asks about its session's lease
// does not move the session: only the lease API's answer does.
func TestSessionCheckOfALeavingClientKeepsTheSession(t *testing.T) {
	ls, f, _ := testLeases(t)
	opts := UsernameOptions{Session: "s"}
	first, done, err := ls.acquire(context.Background(), "tok", "session-s", opts, "background.example")
	if err != nil {
		t.Fatal(err)
	}
	done()
	f.coolFor("site.example")
	left, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := ls.acquire(left, "tok", "session-s", opts, "site.example"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a request whose client left: %v, want context.Canceled", err)
	}
	h, done, err := ls.acquire(context.Background(), "tok", "session-s", opts, "background.example")
	if err != nil {
		t.Fatal(err)
	}
	done()
	if h != first {
		t.Error("the session moved when its client left during the check")
	}
	if n := f.count("acquire"); n != 1 {
		t.Errorf("%d leases, want the session's one", n)
	}
}
