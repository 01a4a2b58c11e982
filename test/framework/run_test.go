package framework

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRunUntilStoppedWaitsForReadyAndStops(t *testing.T) {
	ready := make(chan struct{})
	errStopped := errors.New("stopped")
	stop, err := RunUntilStopped(context.Background(), func(ctx context.Context) error {
		close(ready)
		<-ctx.Done()
		return errStopped
	}, ready)
	if err != nil {
		t.Fatalf("RunUntilStopped: %v", err)
	}
	if err := stop(); !errors.Is(err, errStopped) {
		t.Errorf("stop() = %v, want f's error %v", err, errStopped)
	}
	if err := stop(); !errors.Is(err, errStopped) {
		t.Errorf("second stop() = %v, want the same error", err)
	}
}

func TestRunUntilStoppedReportsAFailureBeforeReady(t *testing.T) {
	boom := errors.New("boom")
	stop, err := RunUntilStopped(context.Background(), func(context.Context) error { return boom }, make(chan struct{}))
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("RunUntilStopped error = %v, want one naming f's failure", err)
	}
	if got := stop(); !errors.Is(got, boom) {
		t.Errorf("stop() = %v, want %v", got, boom)
	}
}
