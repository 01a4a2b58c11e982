package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// slowReports is a Leaser whose reports wait for release before they are
// applied, recording when each call happened.
type slowReports struct {
	*fakeLeaser
	release chan struct{}
	mu      sync.Mutex
	events  []string
}

var _ Leaser = (*slowReports)(nil)

func (s *slowReports) event(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

func (s *slowReports) Report(ctx context.Context, token, id, result, target string) error {
	<-s.release
	err := s.fakeLeaser.Report(ctx, token, id, result, target)
	s.event("report applied")
	return err
}

func (s *slowReports) Acquire(ctx context.Context, token string, req wire.AcquireRequest) (*wire.Lease, error) {
	s.event("acquire")
	return s.fakeLeaser.Acquire(ctx, token, req)
}

// A session's request that arrives while its proxy's rate_limited report
// is on its way moves off the proxy only once the report is applied: asked
// earlier, the lease API does not yet know the proxy cools for the host and
// may lease it again (#49: a Crawlee browser's parallel pages share one
// session; a retry went out through the proxy just cooled, on a new lease).
// The broken order (the session marked as moving, the report not waited
// for) is run beside it and must show the early lease.
func TestSessionMovesOnlyOnceTheReportIsApplied(t *testing.T) {
	for _, tc := range []struct {
		name string
		// report runs the gateway's report of h's proxy for host.
		report    func(g *Gateway, h *holding, host string)
		wantEarly bool
	}{
		{name: "the gateway's report", report: func(g *Gateway, h *holding, host string) {
			g.reportRateLimited(context.Background(), h, host)
		}},
		{name: "negative control: moving before the report is applied", wantEarly: true, report: func(g *Gateway, h *holding, host string) {
			g.leases.cool(h, host)()
			_ = g.leases.leaser.Report(context.Background(), h.token, h.id, "rate_limited", host)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
			leaser := &slowReports{fakeLeaser: newFakeLeaser(clk.Now), release: make(chan struct{})}
			o := DefaultOptions()
			o.Addr = "127.0.0.1:0"
			g, err := New(o, Deps{Leaser: leaser, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			opts := UsernameOptions{Session: "a"}
			h1, done1, err := g.leases.acquire(ctx, "tok", "session-a", opts, "example.com")
			if err != nil {
				t.Fatal(err)
			}
			defer done1()
			reported := make(chan struct{})
			go func() {
				defer close(reported)
				tc.report(g, h1, "example.com")
			}()
			// The session's next request for the host, while the report is
			// on its way.
			eventually(t, "the session cooling for the host", func() bool {
				g.leases.mu.Lock()
				defer g.leases.mu.Unlock()
				return h1.cooling["example.com"]
			})
			moved := make(chan error, 1)
			go func() {
				_, done, err := g.leases.acquire(ctx, "tok", "session-a", opts, "example.com")
				if err == nil {
					done()
				}
				moved <- err
			}()
			time.Sleep(100 * time.Millisecond) // time for an early lease to be asked for
			close(leaser.release)
			<-reported
			if err := <-moved; err != nil {
				t.Fatal(err)
			}
			leaser.mu.Lock()
			events := leaser.events
			leaser.mu.Unlock()
			early := len(events) == 3 && events[1] == "acquire" && events[2] == "report applied"
			if early != tc.wantEarly || len(events) != 3 {
				t.Errorf("calls %q: a lease asked for before the report was applied: %v, want %v", events, early, tc.wantEarly)
			}
		})
	}
}
