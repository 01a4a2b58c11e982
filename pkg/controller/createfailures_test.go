package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCreateFailuresBackOff(t *testing.T) {
	var f createFailures
	now := time.Unix(1_000_000, 0)
	const base, limit = 10 * time.Second, 75 * time.Second
	var got []time.Duration
	for range 5 {
		d, _ := f.record("uid-a", 1, now, base, limit)
		got = append(got, d)
	}
	if diff := cmp.Diff([]time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 75 * time.Second, 75 * time.Second}, got); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	if w, ok := f.wait("uid-a", 1, now.Add(30*time.Second)); !ok || w != 45*time.Second {
		t.Errorf("wait 30s after the last failure = (%s, %v), want (45s, true)", w, ok)
	}
	if _, ok := f.wait("uid-a", 1, now.Add(75*time.Second)); ok {
		t.Error("wait at retryAt still waits")
	}
	// Another Proxy is not held back (negative control for a shared counter).
	if _, ok := f.wait("uid-b", 1, now); ok {
		t.Error("uid-b waits for uid-a's failures")
	}
	// A spec edit lifts the wait and starts counting again.
	if _, ok := f.wait("uid-a", 2, now); ok {
		t.Error("a new generation still waits")
	}
	if d, n := f.record("uid-a", 2, now, base, limit); d != base || n != 1 {
		t.Errorf("first failure of a new generation = (%s, %d), want (%s, 1)", d, n, base)
	}
	f.reset("uid-a")
	if _, ok := f.wait("uid-a", 2, now); ok {
		t.Error("wait after reset")
	}
}
