package app

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/health"
)

// Health engine wiring: its flags and the adapter that lets the reconciler
// read the engine's snapshots. Run adds the engine to the manager.

// HealthOptions are the health engine's settings (see health.Options).
type HealthOptions struct {
	// Workers is the number of concurrent probes.
	Workers int
	// Tick is how often due proxies are looked for.
	Tick time.Duration
	// MinReportInterval rate-limits latency-only status updates.
	MinReportInterval time.Duration
	// EventBuffer is the capacity of the engine → reconciler channel.
	EventBuffer int
}

// DefaultHealthOptions returns the engine's defaults.
func DefaultHealthOptions() HealthOptions {
	return HealthOptions{
		Workers:           health.DefaultWorkers,
		Tick:              health.DefaultTick,
		MinReportInterval: health.DefaultMinReportInterval,
		EventBuffer:       health.DefaultEventBuffer,
	}
}

// AddFlags registers the health engine's flags on fs.
func (o *HealthOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Workers, "health-workers", o.Workers, "Concurrent health probes.")
	fs.DurationVar(&o.Tick, "health-tick", o.Tick, "How often the health engine looks for proxies due a probe.")
	fs.DurationVar(&o.MinReportInterval, "health-min-report-interval", o.MinReportInterval, "Minimum time between two latency-only status updates of a healthy proxy.")
	fs.IntVar(&o.EventBuffer, "health-event-buffer", o.EventBuffer, "Capacity of the health engine's transition channel (a full channel drops the event; the next probe retries).")
}

// Validate reports every invalid health option.
func (o *HealthOptions) Validate() error {
	var errs []error
	if o.Workers <= 0 {
		errs = append(errs, fmt.Errorf("--health-workers: must be positive, got %d", o.Workers))
	}
	if o.EventBuffer <= 0 {
		errs = append(errs, fmt.Errorf("--health-event-buffer: must be positive, got %d", o.EventBuffer))
	}
	if o.Tick <= 0 {
		errs = append(errs, fmt.Errorf("--health-tick: must be positive, got %s", o.Tick))
	}
	if o.MinReportInterval <= 0 {
		errs = append(errs, fmt.Errorf("--health-min-report-interval: must be positive, got %s", o.MinReportInterval))
	}
	return errors.Join(errs...)
}

// HealthSource adapts the engine's snapshots to the reconciler's
// controller.HealthSource: the two packages share no types, so neither
// imports the other.
func HealthSource(e *health.Engine) controller.HealthSource { return healthSource{e} }

type healthSource struct{ e *health.Engine }

func (h healthSource) Snapshot(key types.NamespacedName) (controller.HealthSnapshot, bool) {
	s, ok := h.e.Snapshot(key)
	if !ok {
		return controller.HealthSnapshot{}, false
	}
	return controller.HealthSnapshot{
		Healthy:    s.Healthy,
		Reason:     s.Reason,
		Message:    s.Message,
		Latency:    s.Latency,
		ObservedAt: s.CheckedAt,
		ProxyURL:   s.ProxyURL,
	}, true
}
