package leasing

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// Gate says whether this replica serves leases. It opens on the replica
// that leads, once that replica has loaded the lease checkpoint (Takeover);
// until then every lease request is refused with ReasonNotLeader, naming the
// leader, so that a standby, whose store is empty, never answers as if it
// held no leases.
type Gate struct {
	open atomic.Bool
	// leader names the replica that serves ("" if unknown).
	leader func(ctx context.Context) string
}

// NewGate returns a closed gate; leader (nil: unknown) names who serves
// instead, for the refusal.
func NewGate(leader func(ctx context.Context) string) *Gate {
	if leader == nil {
		leader = func(context.Context) string { return "" }
	}
	return &Gate{leader: leader}
}

// Open lets lease requests through from now on.
func (g *Gate) Open() { g.open.Store(true) }

// IsOpen reports whether this replica serves leases (a nil gate always does).
func (g *Gate) IsOpen() bool { return g == nil || g.open.Load() }

// check is nil when the gate is open, else a ReasonNotLeader error.
func (g *Gate) check(ctx context.Context) error {
	if g.IsOpen() {
		return nil
	}
	leader := g.leader(ctx)
	msg := "this replica does not serve leases yet (it is a standby, or is loading the lease checkpoint)"
	if leader != "" {
		msg = fmt.Sprintf("this replica is a standby; the leader %q serves leases", leader)
	}
	return &Error{Reason: ReasonNotLeader, Leader: leader, err: fmt.Errorf("%s", msg)}
}

// Takeover is the leader-elected Runnable that makes this replica serve:
// Prepare (load the lease checkpoint), then open the gate, then Run (the
// checkpoint writer) until ctx ends. Without leader election it runs at once.
// A failed Prepare stops the process (the manager returns the error), so a
// replica that could not load the leases never serves without them.
type Takeover struct {
	Gate    *Gate
	Prepare func(ctx context.Context) error
	Run     func(ctx context.Context) error
}

// Start prepares, opens and runs.
func (t *Takeover) Start(ctx context.Context) error {
	if t.Prepare != nil {
		if err := t.Prepare(ctx); err != nil {
			return fmt.Errorf("taking over the leases: %w", err)
		}
	}
	t.Gate.Open()
	if t.Run != nil {
		return t.Run(ctx)
	}
	<-ctx.Done()
	return nil
}

// Steps is a Prepare that runs each step in order and stops at the first
// error (nil steps: nothing to prepare).
func Steps(steps ...func(ctx context.Context) error) func(ctx context.Context) error {
	if len(steps) == 0 {
		return nil
	}
	return func(ctx context.Context) error {
		for _, step := range steps {
			if err := step(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}

// NeedLeaderElection is true: only the leader serves leases.
func (t *Takeover) NeedLeaderElection() bool { return true }

// LeaseHolder names the leader as the leader-election Lease namespace/name
// says (its holderIdentity), read at most once a second: the Gate's leader
// function on a replica that elects one.
func LeaseHolder(leases coordinationv1client.LeasesGetter, namespace, name string, clk clock.PassiveClock) func(ctx context.Context) string {
	var mu sync.Mutex
	var holder string
	var readAt time.Time
	return func(ctx context.Context) string {
		mu.Lock()
		defer mu.Unlock()
		if now := clk.Now(); readAt.IsZero() || now.Sub(readAt) >= time.Second {
			readAt = now
			holder = ""
			if l, err := leases.Leases(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
		}
		return holder
	}
}
