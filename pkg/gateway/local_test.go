package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// TestLocalLeaser: every call goes to the in-process API while this replica
// serves leases and to the remote one otherwise, decided per call (a
// handover between two calls of one session moves the second).
func TestLocalLeaser(t *testing.T) {
	ctx := context.Background()
	calls := func(l Leaser) {
		_, _ = l.Acquire(ctx, "tok", wire.AcquireRequest{Target: "a.example", TTLSeconds: 30})
		_ = l.Report(ctx, "tok", "l1", "rate_limited", "a.example")
		_, _ = l.Renew(ctx, "tok", "l1", time.Minute)
		_ = l.Release(ctx, "tok", "l1")
	}
	all := []string{"acquire tok a.example", "report l1 rate_limited a.example", "renew l1", "release l1"}
	for _, tc := range []struct {
		name       string
		serving    []bool
		wantLocal  []string
		wantRemote []string
	}{
		{name: "serving: in process", serving: []bool{true, true, true, true}, wantLocal: all},
		{name: "not serving: through the network", serving: []bool{false, false, false, false}, wantRemote: all},
		{name: "a handover mid-session moves the calls after it", serving: []bool{true, true, false, false},
			wantLocal: all[:2], wantRemote: all[2:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := clock.RealClock{}.Now
			local, remote := newFakeLeaser(now), newFakeLeaser(now)
			n := 0
			l := &localLeaser{remote: remote, local: LocalAPI{Leaser: local, Serving: func() bool {
				n++
				return tc.serving[n-1]
			}}}
			calls(l)
			if diff := cmp.Diff(tc.wantLocal, local.calls); diff != "" {
				t.Errorf("in process (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRemote, remote.calls); diff != "" {
				t.Errorf("through the network (-want +got):\n%s", diff)
			}
		})
	}
}
