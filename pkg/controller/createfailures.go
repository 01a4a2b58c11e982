package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// createFailures counts, per Proxy, creates in a row that the provider
// accepted and whose instance then vanished, and when the next create may
// go. It lives in memory, as the workqueue's backoff does: after a restart
// the first retry comes at once and the doubling starts again. A spec edit
// (new generation) lifts the wait: the user changed something, try it.
// The zero value is ready to use; safe for concurrent reconciles.
type createFailures struct {
	mu    sync.Mutex
	byUID map[types.UID]createFailure
}

type createFailure struct {
	count      int
	generation int64
	retryAt    time.Time
}

// record counts one more failure and returns the delay before the next create
// (base doubled per earlier failure, capped at limit) and the count.
func (f *createFailures) record(uid types.UID, generation int64, now time.Time, base, limit time.Duration) (time.Duration, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byUID == nil {
		f.byUID = map[types.UID]createFailure{}
	}
	c := f.byUID[uid]
	if c.generation != generation {
		c = createFailure{generation: generation}
	}
	delay := base
	for i := 0; i < c.count && delay < limit; i++ {
		delay *= 2
	}
	delay = min(delay, limit)
	c.count++
	c.retryAt = now.Add(delay)
	f.byUID[uid] = c
	return delay, c.count
}

// wait returns how long a create of uid must still wait, and whether it must.
func (f *createFailures) wait(uid types.UID, generation int64, now time.Time) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.byUID[uid]
	if !ok || c.generation != generation || !now.Before(c.retryAt) {
		return 0, false
	}
	return c.retryAt.Sub(now), true
}

// reset forgets uid: its instance ran, or the Proxy is gone.
func (f *createFailures) reset(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.byUID, uid)
}
