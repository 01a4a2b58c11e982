package cputime

import (
	"os"
	"testing"
	"time"
)

// TestSelfAndProcessAgree: after a spin of CPU work both readings of this
// process grew by about the work, and agree with each other to a few ticks.
func TestSelfAndProcessAgree(t *testing.T) {
	self0, proc0 := Self(t), Process(t, os.Getpid())
	for start := Self(t); Self(t)-start < 200*time.Millisecond; {
	}
	self, proc := Self(t)-self0, Process(t, os.Getpid())-proc0
	if self < 200*time.Millisecond {
		t.Fatalf("Self grew by %v over 200ms of work", self)
	}
	if d := proc - self; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("Process grew by %v, Self by %v: want them within 50ms", proc, self)
	}
}
