package gc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	clocktesting "k8s.io/utils/clock/testing"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/proxy-operator/proxy-operator/pkg/gc"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
)

// TestStartFirstSweepAfterAFullInterval: nothing is listed before one full
// interval has passed, then one sweep per interval.
func TestStartFirstSweepAfterAFullInterval(t *testing.T) {
	clk := clocktesting.NewFakeClock(now)
	f := fake.New(fake.WithClock(clk))
	orphan := f.Plant(instance("orphan", "gone", time.Hour))
	rec := &recorder{}
	opts := gc.DefaultOptions()
	s, err := gc.New(gc.Config{Options: opts, Reader: ctrlfake.NewClientBuilder().WithScheme(scheme(t)).Build(),
		Providers: providers{"a": f}, Tag: tag, Clock: clk, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	if !s.NeedLeaderElection() {
		t.Error("the collector deletes: it must run on the leader only")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	waitFor(t, "the collector's ticker", clk.HasWaiters)

	clk.Step(opts.Interval - time.Nanosecond)
	time.Sleep(50 * time.Millisecond) // a sweep, if one wrongly ran, has had its time
	if n := len(f.CallsOf(provider.OpList)); n != 0 {
		t.Fatalf("%d listings before the first interval ended, want 0", n)
	}
	clk.Step(time.Nanosecond)
	waitFor(t, "the first sweep", func() bool { return len(rec.sweepResults()) == 1 })
	if _, ok := f.Instance(orphan); ok {
		t.Error("the first sweep left the orphan")
	}
	clk.Step(opts.Interval)
	waitFor(t, "the second sweep", func() bool { return len(rec.sweepResults()) == 2 })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v after its context ended, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
}

func TestStartDisabledReturnsAtOnce(t *testing.T) {
	f := fake.New()
	opts := gc.DefaultOptions()
	opts.Interval = 0
	s, err := gc.New(gc.Config{Options: opts, Reader: ctrlfake.NewClientBuilder().WithScheme(scheme(t)).Build(),
		Providers: providers{"a": f}, Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Errorf("Start of a disabled collector = %v, want nil", err)
	}
	if n := len(f.Calls()); n != 0 {
		t.Errorf("a disabled collector made %d provider calls", n)
	}
}

func TestNewRefuses(t *testing.T) {
	reader := ctrlfake.NewClientBuilder().WithScheme(scheme(t)).Build()
	ok := func() gc.Config {
		return gc.Config{Options: gc.DefaultOptions(), Reader: reader, Providers: providers{}, Tag: tag}
	}
	tests := []struct {
		name    string
		mutate  func(*gc.Config)
		wantErr string // "" means accepted
	}{
		{"defaults", func(*gc.Config) {}, ""},
		{"namespaced cache", func(c *gc.Config) { c.Namespaces = []string{"team-a"} }, "--gc-allow-namespaced"},
		{"namespaced cache, allowed", func(c *gc.Config) { c.Namespaces = []string{"team-a"}; c.AllowNamespaced = true }, ""},
		{"namespaced cache, collector disabled", func(c *gc.Config) { c.Namespaces = []string{"team-a"}; c.Interval = 0 }, ""},
		{"negative interval", func(c *gc.Config) { c.Interval = -time.Second }, "--gc-interval"},
		{"zero minimum age", func(c *gc.Config) { c.MinAge = 0 }, "--gc-min-age"},
		{"no reader", func(c *gc.Config) { c.Reader = nil }, "Proxy reader"},
		{"no providers", func(c *gc.Config) { c.Providers = nil }, "providers"},
		{"no tag", func(c *gc.Config) { c.Tag = "" }, "instance tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok()
			tt.mutate(&cfg)
			_, err := gc.New(cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("New = %v, want it accepted", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("New = %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	o := gc.DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--gc-interval=30s", "--gc-min-age=1m", "--gc-dry-run", "--gc-allow-namespaced"}); err != nil {
		t.Fatal(err)
	}
	want := gc.Options{Interval: 30 * time.Second, MinAge: time.Minute, DryRun: true, AllowNamespaced: true}
	if o != want {
		t.Errorf("parsed %+v, want %+v", o, want)
	}
	if d := gc.DefaultOptions(); d.Interval != 10*time.Minute || d.MinAge != 10*time.Minute || d.DryRun || d.AllowNamespaced {
		t.Errorf("defaults = %+v, want 10m, 10m, deleting, cluster-wide only", d)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
