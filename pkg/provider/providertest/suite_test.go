package providertest_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
	"github.com/proxy-operator/proxy-operator/pkg/provider/providertest"
)

// These tests cover the recording machinery behind Check; the suite's cases
// themselves are exercised against the fake and its broken variants in
// pkg/provider/fake.

func TestCheckWithoutNewFailsEveryCase(t *testing.T) {
	got := providertest.Failed(providertest.Check(providertest.Harness{}))
	if diff := cmp.Diff(providertest.CaseNames(), got); diff != "" {
		t.Errorf("failed cases (-want +got):\n%s", diff)
	}
}

func TestCheckRecordsFatalAndRunsCleanups(t *testing.T) {
	var cleanups, afterFatal atomic.Int32
	h := providertest.Harness{
		New: func(t providertest.T) provider.Provider {
			t.Cleanup(func() { cleanups.Add(1) })
			t.Fatalf("backend unavailable for %s", t.Name())
			afterFatal.Add(1) // Fatalf must stop the case, as testing's does
			return fake.New()
		},
	}
	failures := providertest.Check(h)
	if len(failures) != len(providertest.CaseNames()) {
		t.Fatalf("Check reported %d failures, want one per case (%d)", len(failures), len(providertest.CaseNames()))
	}
	for _, f := range failures {
		if diff := cmp.Diff([]string{"backend unavailable for " + f.Case}, f.Messages); diff != "" {
			t.Errorf("messages of %s (-want +got):\n%s", f.Case, diff)
		}
	}
	if n := afterFatal.Load(); n != 0 {
		t.Errorf("code after Fatalf ran %d times", n)
	}
	if n := cleanups.Load(); int(n) != len(providertest.CaseNames()) {
		t.Errorf("cleanups ran %d times, want %d", n, len(providertest.CaseNames()))
	}
}

// panicking panics in Get: Check must record it, not crash the test binary.
type panicking struct{ *fake.Provider }

func (panicking) Get(context.Context, string) (*provider.Instance, error) { panic("get exploded") }

func TestCheckRecordsPanics(t *testing.T) {
	h := providertest.Harness{
		New:     func(providertest.T) provider.Provider { return panicking{fake.New()} },
		Timeout: 100 * time.Millisecond,
	}
	var found bool
	for _, f := range providertest.Check(h) {
		if f.Case == providertest.CaseCreateThenGet {
			found = strings.Contains(strings.Join(f.Messages, "\n"), "panic: get exploded")
		}
	}
	if !found {
		t.Errorf("Check did not record the panic in %s", providertest.CaseCreateThenGet)
	}
}

func TestCheckCancelsContextBeforeCleanups(t *testing.T) {
	var cancelledAtCleanup atomic.Bool
	h := providertest.Harness{
		New: func(t providertest.T) provider.Provider {
			ctx := t.Context()
			t.Cleanup(func() { cancelledAtCleanup.Store(ctx.Err() != nil) })
			return fake.New()
		},
	}
	if failures := providertest.Check(h); len(failures) != 0 {
		t.Fatalf("Check(fake) = %+v, want none", failures)
	}
	if !cancelledAtCleanup.Load() {
		t.Errorf("the case context was still live when cleanups ran; testing cancels it first")
	}
}

func TestCheckDeletesWhatTheCaseCreated(t *testing.T) {
	var providers []*fake.Provider
	h := providertest.Harness{
		New: func(providertest.T) provider.Provider {
			f := fake.New()
			providers = append(providers, f) // cases run one after another
			return f
		},
	}
	if failures := providertest.Check(h); len(failures) != 0 {
		t.Fatalf("Check(fake) = %+v, want none", failures)
	}
	for i, f := range providers {
		if left := f.Instances(); len(left) != 0 {
			t.Errorf("case %s left instances behind: %+v", providertest.CaseNames()[i], left)
		}
	}
}
