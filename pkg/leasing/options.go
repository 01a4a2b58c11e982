package leasing

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Flow-control queue limit defaults. A waiting request holds an HTTP
// connection (or an aggregated API request) open, so the limits bound
// goroutines and sockets as much as they bound unfairness.
const (
	DefaultQueueMaxPerFlow = 64
	DefaultQueueMaxPerBand = 1024
	DefaultQueueMax        = 4096
)

// Options configure the lease store and the wait queue in front of both
// lease APIs.
type Options struct {
	// MaxLeasesPerProxy, MaxLeaseTTL, DefaultLeaseTTL, CooldownWindow and
	// SweepInterval are the lease store's options (lease.Options).
	MaxLeasesPerProxy int
	MaxLeaseTTL       time.Duration
	DefaultLeaseTTL   time.Duration
	CooldownWindow    time.Duration
	SweepInterval     time.Duration
	// MaxCooldownsPerHolder bounds the cooldowns one holder's reports run
	// at once (lease.Options.MaxCooldownsPerHolder).
	MaxCooldownsPerHolder int
	// MaxEndedPerHolder bounds the ended leases remembered for one holder's
	// late reports (lease.Options.MaxEndedPerHolder).
	MaxEndedPerHolder int

	// QueueMaxPerFlow, QueueMaxPerBand and QueueMax bound waiting lease
	// requests (flowcontrol.Options); over a limit a request is answered 429
	// at once. QueueRetryAfter is the Retry-After of that answer.
	QueueMaxPerFlow int
	QueueMaxPerBand int
	QueueMax        int
	QueueRetryAfter time.Duration
	// QueueMaxPerIdentity bounds the waiting requests of one identity (a
	// token identity or a Kubernetes user) over all its flows and bands; 0
	// means a quarter of QueueMax, so that no identity can fill the queue.
	QueueMaxPerIdentity int
	// MaxPriority grants priorities above the default (PriorityGrants);
	// nil: none.
	MaxPriority PriorityGrants
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		MaxLeasesPerProxy:     lease.DefaultMaxLeasesPerProxy,
		MaxLeaseTTL:           lease.DefaultMaxTTL,
		DefaultLeaseTTL:       lease.DefaultDefaultTTL,
		CooldownWindow:        lease.DefaultCooldownWindow,
		SweepInterval:         lease.DefaultSweepInterval,
		MaxCooldownsPerHolder: lease.DefaultMaxCooldownsPerHolder,
		MaxEndedPerHolder:     lease.DefaultMaxEndedPerHolder,
		QueueMaxPerFlow:       DefaultQueueMaxPerFlow,
		QueueMaxPerBand:       DefaultQueueMaxPerBand,
		QueueMax:              DefaultQueueMax,
		QueueRetryAfter:       flowcontrol.DefaultRetryAfter,
		MaxPriority:           PriorityGrants{},
	}
}

// AddFlags registers the lease store and wait queue flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.MaxLeasesPerProxy, "max-leases-per-proxy", o.MaxLeasesPerProxy, "Live leases one proxy may hold at once (1: exclusive).")
	fs.DurationVar(&o.MaxLeaseTTL, "max-lease-ttl", o.MaxLeaseTTL, "Longest TTL a lease may be granted or renewed for.")
	fs.DurationVar(&o.DefaultLeaseTTL, "default-lease-ttl", o.DefaultLeaseTTL, "TTL of a lease that asks for none.")
	fs.DurationVar(&o.CooldownWindow, "cooldown-window", o.CooldownWindow, "How long a (proxy, target) pair is skipped after a rate_limited or banned report, and how long an ended lease stays reportable.")
	fs.DurationVar(&o.SweepInterval, "lease-sweep-interval", o.SweepInterval, "Longest sleep of the lease store's timer: expiries and cooldown ends fire at their instant; this bounds how long ended leases past their report window stay in memory.")
	fs.IntVar(&o.MaxCooldownsPerHolder, "lease-max-cooldowns-per-holder", o.MaxCooldownsPerHolder, "Cooldowns the reports on one holder's leases (token identity or Kubernetes user) may run at once; a report that would start one more is refused (403 cooldown_limit) until one ends.")
	fs.IntVar(&o.MaxEndedPerHolder, "lease-max-ended-per-holder", o.MaxEndedPerHolder, "Ended leases remembered for one holder (token identity or Kubernetes user) for late reports and renewals, within --cooldown-window; past it the holder's oldest is forgotten (a report on it is answered 404).")
	fs.IntVar(&o.QueueMaxPerFlow, "lease-queue-max-per-flow", o.QueueMaxPerFlow, "Waiting lease requests one flow (token identity or Kubernetes user) may have in one priority band.")
	fs.IntVar(&o.QueueMaxPerBand, "lease-queue-max-per-band", o.QueueMaxPerBand, "Waiting lease requests per priority band.")
	fs.IntVar(&o.QueueMax, "lease-queue-max", o.QueueMax, "Waiting lease requests in all.")
	fs.Var(o.MaxPriority, "lease-max-priority", fmt.Sprintf("Who may ask for a priority above the default 0: subject=priority, comma-separated, subject token:<identity>, user:<name> or group:<name> (e.g. token:crawler-a=10,group:ops=5); a request above its identity's highest is refused. Anyone may ask for less, down to %d.", MinPriority))
	fs.IntVar(&o.QueueMaxPerIdentity, "lease-queue-max-per-identity", o.QueueMaxPerIdentity, "Waiting lease requests one identity (token identity or Kubernetes user) may have over all its flows and priority bands (0: a quarter of --lease-queue-max).")
	fs.DurationVar(&o.QueueRetryAfter, "lease-queue-retry-after", o.QueueRetryAfter, "Retry-After of a lease request rejected because a wait queue is full.")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	var errs []error
	if o.MaxLeasesPerProxy < 1 {
		errs = append(errs, fmt.Errorf("--max-leases-per-proxy: must be at least 1, got %d", o.MaxLeasesPerProxy))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--max-lease-ttl", o.MaxLeaseTTL},
		{"--default-lease-ttl", o.DefaultLeaseTTL},
		{"--cooldown-window", o.CooldownWindow},
		{"--lease-sweep-interval", o.SweepInterval},
		{"--lease-queue-retry-after", o.QueueRetryAfter},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", d.flag, d.v))
		}
	}
	if o.DefaultLeaseTTL > o.MaxLeaseTTL && o.MaxLeaseTTL > 0 {
		errs = append(errs, fmt.Errorf("--default-lease-ttl %s exceeds --max-lease-ttl %s", o.DefaultLeaseTTL, o.MaxLeaseTTL))
	}
	for _, q := range []struct {
		flag string
		v    int
	}{
		{"--lease-max-cooldowns-per-holder", o.MaxCooldownsPerHolder},
		{"--lease-max-ended-per-holder", o.MaxEndedPerHolder},
		{"--lease-queue-max-per-flow", o.QueueMaxPerFlow},
		{"--lease-queue-max-per-band", o.QueueMaxPerBand},
		{"--lease-queue-max", o.QueueMax},
	} {
		if q.v < 1 {
			errs = append(errs, fmt.Errorf("%s: must be at least 1, got %d", q.flag, q.v))
		}
	}
	if o.QueueMaxPerIdentity < 0 {
		errs = append(errs, fmt.Errorf("--lease-queue-max-per-identity: must not be negative, got %d", o.QueueMaxPerIdentity))
	}
	return errors.Join(errs...)
}

// StoreOptions are the lease store's options.
func (o *Options) StoreOptions() lease.Options {
	return lease.Options{
		MaxLeasesPerProxy:     o.MaxLeasesPerProxy,
		MaxTTL:                o.MaxLeaseTTL,
		DefaultTTL:            o.DefaultLeaseTTL,
		CooldownWindow:        o.CooldownWindow,
		SweepInterval:         o.SweepInterval,
		MaxCooldownsPerHolder: o.MaxCooldownsPerHolder,
		MaxEndedPerHolder:     o.MaxEndedPerHolder,
	}
}

// queueMaxPerIdentity is QueueMaxPerIdentity, defaulted.
func (o *Options) queueMaxPerIdentity() int {
	if o.QueueMaxPerIdentity > 0 {
		return o.QueueMaxPerIdentity
	}
	return max(o.QueueMax/4, 1)
}

// queueOptions are the wait queue's options, observed by m (nil: none).
func (o *Options) queueOptions(m flowcontrol.Metrics) flowcontrol.Options {
	return flowcontrol.Options{
		MaxQueuedPerFlow:  o.QueueMaxPerFlow,
		MaxQueuedPerBand:  o.QueueMaxPerBand,
		MaxQueued:         o.QueueMax,
		MaxQueuedPerOwner: o.queueMaxPerIdentity(),
		RetryAfter:        o.QueueRetryAfter,
		Metrics:           m,
	}
}
