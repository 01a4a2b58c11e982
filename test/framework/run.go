package framework

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// StopTimeout bounds how long a stop function waits for its component.
const StopTimeout = 60 * time.Second

// RunUntilStopped runs f on its own context in a goroutine and returns a
// function that cancels that context and waits (at most StopTimeout) for f to
// return, yielding f's error; calling it again returns the same result. With
// ready non-nil it first waits, at most StopTimeout, for ready to close or f
// to fail.
func RunUntilStopped(ctx context.Context, f func(context.Context) error, ready <-chan struct{}) (func() error, error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	var stopErr error
	finish := func(wait bool) {
		once.Do(func() {
			cancel()
			if !wait {
				return
			}
			select {
			case stopErr = <-done:
			case <-time.After(StopTimeout):
				stopErr = fmt.Errorf("did not stop within %s", StopTimeout)
			}
		})
	}
	stop := func() error { finish(true); return stopErr }
	if ready == nil {
		return stop, nil
	}
	select {
	case <-ready:
		return stop, nil
	case err := <-done:
		// f has returned: record its error so stop does not wait for it
		// a second time.
		once.Do(func() { cancel(); stopErr = err })
		return stop, fmt.Errorf("stopped before it was ready: %v", err)
	case <-time.After(StopTimeout):
		return stop, errors.New("not ready within " + StopTimeout.String())
	}
}
