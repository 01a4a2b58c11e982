package leasing

import (
	"context"
	"fmt"
	"time"
)

// queueShutdownTimeout bounds waiting for evicted waiters to return at stop.
const queueShutdownTimeout = 10 * time.Second

// queueRunnable shuts the wait queue down when the manager stops:
// every waiter is evicted (answered 503) so the API servers' graceful
// shutdown does not wait out long waits.
type queueRunnable struct{ l *Leasing }

// Start waits for ctx to end, then shuts the queue down (Leasing.Shutdown).
func (r *queueRunnable) Start(ctx context.Context) error {
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queueShutdownTimeout)
	defer cancel()
	if err := r.l.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down the lease wait queue: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica runs its queue (a standby's
// stays empty behind the closed Gate).
func (r *queueRunnable) NeedLeaderElection() bool { return false }
