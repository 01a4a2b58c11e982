package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestIntervalsFlagsAndValidate(t *testing.T) {
	i := DefaultIntervals()
	if err := i.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	i.AddFlags(fs)
	if err := fs.Parse([]string{"--drift-poll-interval=30s", "--quota-retry-interval=0", "--create-retry-interval=-1s"}); err != nil {
		t.Fatal(err)
	}
	if i.DriftPoll != 30*time.Second {
		t.Errorf("--drift-poll-interval parsed as %s", i.DriftPoll)
	}
	err := i.Validate()
	if err == nil {
		t.Fatal("Validate() = nil with two intervals not positive")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{"--quota-retry-interval: must be positive, got 0s", "--create-retry-interval: must be positive, got -1s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Validate() (-want +got):\n%s", diff)
	}
}

func TestCacheOptions(t *testing.T) {
	if got := CacheOptions(nil); got.DefaultNamespaces != nil || len(got.ByObject) != len(CacheByObject()) {
		t.Errorf("no namespaces: %+v, want the whole cluster with the reconciler's per-object options", got)
	}
	got := CacheOptions([]string{"a", "b"})
	if len(got.DefaultNamespaces) != 2 || len(got.ByObject) != len(CacheByObject()) {
		t.Errorf("two namespaces: %+v", got)
	}
	for _, ns := range []string{"a", "b"} {
		if _, ok := got.DefaultNamespaces[ns]; !ok {
			t.Errorf("namespace %s not cached", ns)
		}
	}
}
