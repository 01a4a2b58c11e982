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

// Close refuses lease requests from now on (this replica stopped serving).
func (g *Gate) Close() { g.open.Store(false) }

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
	return &Error{Reason: ReasonNotLeader, Leader: leader, Cause: fmt.Errorf("%s", msg)}
}

// Takeover is the leader-elected Runnable that makes this replica serve:
// Prepare (load the lease checkpoint), then open the gate, then Run (the
// checkpoint writer) until ctx ends. Without leader election it runs at once.
// A failed Prepare stops the process (the manager returns the error), so a
// replica that could not load the leases never serves without them. When ctx
// ends (shutdown, or the leadership lost) the gate closes and Stop runs
// (it freezes the store) before Run's own context ends, so that Run's last
// checkpoint holds every change this replica made.
type Takeover struct {
	Gate    *Gate
	Prepare func(ctx context.Context) error
	Run     func(ctx context.Context) error
	Stop    func()

	started atomic.Bool
	done    chan struct{}
	once    sync.Once
}

func (t *Takeover) doneCh() chan struct{} {
	t.once.Do(func() { t.done = make(chan struct{}) })
	return t.done
}

// Start prepares, opens and runs.
func (t *Takeover) Start(ctx context.Context) error {
	t.started.Store(true)
	defer close(t.doneCh())
	if t.Prepare != nil {
		if err := t.Prepare(ctx); err != nil {
			return fmt.Errorf("taking over the leases: %w", err)
		}
	}
	t.Gate.Open()
	// Run outlives ctx until this replica no longer changes a lease.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-runCtx.Done():
			return
		}
		t.Gate.Close()
		if t.Stop != nil {
			t.Stop()
		}
		cancel()
	}()
	if t.Run != nil {
		return t.Run(runCtx)
	}
	<-runCtx.Done()
	return nil
}

// Wait blocks until a started Start has returned (its last checkpoint
// written) or ctx ends; it returns at once on a replica that never led.
// The manager does not wait for it when the leadership is lost, so the
// composition root does.
func (t *Takeover) Wait(ctx context.Context) {
	if !t.started.Load() {
		return
	}
	select {
	case <-t.doneCh():
	case <-ctx.Done():
	}
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
			// Bounded: a refusal must not hang while kube-apiserver does.
			gctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			l, err := leases.Leases(namespace).Get(gctx, name, metav1.GetOptions{})
			cancel()
			if err == nil && l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
		}
		return holder
	}
}
