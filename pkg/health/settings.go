package health

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/pflag"
)

// Settings are the engine's tunables as flags set them; Apply copies them
// into Options.
type Settings struct {
	// Workers is the number of concurrent probes.
	Workers int
	// Tick is how often due proxies are looked for.
	Tick time.Duration
	// MinReportInterval rate-limits latency-only status updates.
	MinReportInterval time.Duration
	// EventBuffer is the capacity of the engine → reconciler channel.
	EventBuffer int
	// DeniedCIDRs are networks probes may not reach (Denylist.Prefixes).
	DeniedCIDRs []string
}

// DefaultSettings returns the engine's defaults.
func DefaultSettings() Settings {
	return Settings{
		Workers:           DefaultWorkers,
		Tick:              DefaultTick,
		MinReportInterval: DefaultMinReportInterval,
		EventBuffer:       DefaultEventBuffer,
		DeniedCIDRs:       DefaultDeniedCIDRs(),
	}
}

// AddFlags registers the health engine's flags on fs.
func (o *Settings) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Workers, "health-workers", o.Workers, "Concurrent health probes.")
	fs.DurationVar(&o.Tick, "health-tick", o.Tick, "How often the health engine looks for proxies due a probe.")
	fs.DurationVar(&o.MinReportInterval, "health-min-report-interval", o.MinReportInterval, "Minimum time between two latency-only status updates of a healthy proxy.")
	fs.IntVar(&o.EventBuffer, "health-event-buffer", o.EventBuffer, "Capacity of the health engine's transition channel (a full channel drops the event; the next probe retries).")
	fs.StringSliceVar(&o.DeniedCIDRs, "health-denied-cidrs", o.DeniedCIDRs,
		"Networks that Proxy endpoints and health check URLs may not use: neither a probe nor the gateway connects there, and a probe does not ask a proxy to fetch from there (the API server's own address is always denied). Empty denies none.")
}

// Validate reports every invalid health option.
func (o *Settings) Validate() error {
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
	for _, c := range o.DeniedCIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			errs = append(errs, fmt.Errorf("--health-denied-cidrs: %q is not a CIDR (such as 169.254.0.0/16)", c))
		}
	}
	return errors.Join(errs...)
}

// Apply copies the settings into o (DeniedCIDRs as validated: an invalid
// one is skipped).
func (s Settings) Apply(o *Options) {
	o.Workers, o.Tick, o.MinReportInterval, o.EventBuffer = s.Workers, s.Tick, s.MinReportInterval, s.EventBuffer
	o.Denied.Prefixes = o.Denied.Prefixes[:0]
	for _, c := range s.DeniedCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			o.Denied.Prefixes = append(o.Denied.Prefixes, p.Masked())
		}
	}
}
