package flowcontrol

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Controller is the blocking front of a Core: EnqueueAndWait waits for the
// outcome of a request, and one clock.AfterFunc timer, re-armed to the core's
// NextWakeup, evicts expired requests and catches capacity that appears by
// itself (Dispatcher.NextChange). Safe for concurrent use.
type Controller[R, G any] struct {
	core  *Core[R, G]
	clock clock.WithDelayedExecution
	// timer is guarded by core.mu (armed from the core's onWake).
	timer clock.Timer

	// live counts EnqueueAndWait calls holding a ticket; Shutdown waits for
	// it to drop to zero.
	live      atomic.Int64
	closing   atomic.Bool
	drained   chan struct{}
	drainOnce sync.Once
}

// NewController returns a controller over d.
func NewController[R, G any](d Dispatcher[R, G], clk clock.WithDelayedExecution, opts Options) *Controller[R, G] {
	c := &Controller[R, G]{core: NewCore(d, clk, opts), clock: clk, drained: make(chan struct{})}
	c.core.onWake = c.arm
	c.core.onQueue = func() { c.live.Add(1) }
	return c
}

// Core returns the core, for callers that drive it without blocking.
func (c *Controller[R, G]) Core() *Core[R, G] { return c.core }

// EnqueueAndWait submits req and blocks until it is granted, rejected or
// evicted, or ctx ends. It returns OutcomeDispatched, the grant and nil, or
// another outcome, the zero grant and a *RejectedError (never queued) or
// *EvictedError (queued, left without a grant). When ctx ends while queued
// the request is evicted with OutcomeEvictedDeadline (ctx deadline) or
// OutcomeEvictedCancelled; a grant made in that instant is given back
// through Dispatcher.Release rather than returned.
func (c *Controller[R, G]) EnqueueAndWait(ctx context.Context, req Request[R]) (Outcome, G, error) {
	var zero G
	if err := ctx.Err(); err != nil {
		// The caller is gone: granting would leak the grant.
		return OutcomeRejectedOther, zero, c.core.reject(OutcomeRejectedOther, fmt.Errorf("%w: %w", ErrCancelled, err))
	}
	o, g, t, err := c.core.Enqueue(req)
	if t == nil {
		return o, g, err
	}
	defer c.leave()
	select {
	case <-t.done:
		if g, ok := t.Grant(); ok {
			return OutcomeDispatched, g, nil
		}
		return t.Outcome(), zero, t.Err()
	case <-ctx.Done():
		reason, cause := OutcomeEvictedCancelled, ErrCancelled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			reason, cause = OutcomeEvictedDeadline, ErrDeadline
		}
		if o := c.core.Cancel(t, reason); o != reason {
			// Evicted for another reason first (its own deadline, shutdown).
			return o, zero, t.Err()
		}
		return reason, zero, &EvictedError{Outcome: reason, Cause: fmt.Errorf("%w: %w", cause, context.Cause(ctx)), QueuedAhead: t.ahead}
	}
}

// OnCapacity is the capacity event (see Core.OnCapacity): wire the lease
// store's capacity hook to it.
func (c *Controller[R, G]) OnCapacity() { c.core.OnCapacity() }

// HeldChanged reports a change of Held(flow) (see Core.HeldChanged and
// Options.HeldChangeNotifications): wire the lease store's lease events to it.
func (c *Controller[R, G]) HeldChanged(flow string) { c.core.HeldChanged(flow) }

// Waiting counts the queued requests whose payload match accepts (see
// Core.Waiting).
func (c *Controller[R, G]) Waiting(match func(R) bool) int { return c.core.Waiting(match) }

// Shutdown evicts every waiting request with OutcomeEvictedShutdown, rejects
// later ones, stops the timer, and waits until every EnqueueAndWait that was
// queued has returned, or ctx ends.
func (c *Controller[R, G]) Shutdown(ctx context.Context) error {
	n := c.core.Shutdown()
	// After core.Shutdown nothing new is queued, so live only falls.
	c.closing.Store(true)
	if c.live.Load() == 0 {
		c.drainOnce.Do(func() { close(c.drained) })
	}
	log.FromContext(ctx).V(1).Info("flow control shut down", "evicted", n)
	select {
	case <-c.drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %d waiters to return: %w", c.live.Load(), ctx.Err())
	}
}

func (c *Controller[R, G]) leave() {
	if c.live.Add(-1) == 0 && c.closing.Load() {
		c.drainOnce.Do(func() { close(c.drained) })
	}
}

// arm points the single timer at `at` (zero: stop it). Called under core.mu.
func (c *Controller[R, G]) arm(now, at time.Time) {
	if at.IsZero() {
		if c.timer != nil {
			c.timer.Stop()
		}
		return
	}
	d := max(at.Sub(now), 0)
	// A real AfterFunc timer has no channel and is simply reset. A timer
	// that also sends on a channel nobody reads (the fake clock's) would
	// block on its second firing if reset, so it is replaced instead.
	if c.timer != nil && c.timer.C() == nil {
		c.timer.Reset(d)
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = c.clock.AfterFunc(d, c.fire)
}

// fire runs on the timer. It hands over to a goroutine because a fake
// clock calls it with its own lock held, which the core's clock reads would
// deadlock on; with a real clock this costs one goroutine per wakeup.
func (c *Controller[R, G]) fire() { go c.onTimer() }

func (c *Controller[R, G]) onTimer() {
	if c.core.pauses != nil {
		c.core.pauses.beforeTimerAdvance()
	}
	c.core.Advance()
}
