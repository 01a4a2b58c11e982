package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Lease store, HTTP discovery API and flow-control settings. Run wires them
// (leasingwiring.go); the aggregated API server has its own flag set
// (pkg/apiserver, every flag prefixed --apiserver-).

// DiscoveryTokenEnv holds the discovery API's bearer token when
// --discovery-token-file is not set. A token never goes on the command line,
// where every user of the machine can read it.
const DiscoveryTokenEnv = "PROXY_OPERATOR_DISCOVERY_TOKEN"

// Flow-control queue limit defaults. A waiting request holds an HTTP
// connection (or an aggregated API request) open, so the limits bound
// goroutines and sockets as much as they bound unfairness.
const (
	DefaultQueueMaxPerFlow = 64
	DefaultQueueMaxPerBand = 1024
	DefaultQueueMax        = 4096
)

// LeasingOptions configure the lease store, the HTTP discovery API and the
// wait queue in front of both lease APIs.
type LeasingOptions struct {
	// DiscoveryAddr serves the HTTP discovery API ("0" disables it).
	DiscoveryAddr string
	// DiscoveryTokenFile holds the bearer token (surrounding whitespace
	// ignored). Empty: the token comes from $PROXY_OPERATOR_DISCOVERY_TOKEN;
	// with neither, authentication is off and the server says so loudly.
	DiscoveryTokenFile string
	// DiscoveryMaxWait caps waitSeconds of POST /v1/leases.
	DiscoveryMaxWait time.Duration

	// MaxLeasesPerProxy, MaxLeaseTTL, DefaultLeaseTTL, CooldownWindow and
	// SweepInterval are the lease store's options (lease.Options).
	MaxLeasesPerProxy int
	MaxLeaseTTL       time.Duration
	DefaultLeaseTTL   time.Duration
	CooldownWindow    time.Duration
	SweepInterval     time.Duration

	// QueueMaxPerFlow, QueueMaxPerBand and QueueMax bound waiting lease
	// requests (flowcontrol.Options); over a limit a request is answered 429
	// at once. QueueRetryAfter is the Retry-After of that answer.
	QueueMaxPerFlow int
	QueueMaxPerBand int
	QueueMax        int
	QueueRetryAfter time.Duration
}

// DefaultLeasingOptions returns the defaults.
func DefaultLeasingOptions() LeasingOptions {
	return LeasingOptions{
		DiscoveryAddr:     discovery.DefaultAddr,
		DiscoveryMaxWait:  discovery.DefaultMaxWait,
		MaxLeasesPerProxy: lease.DefaultMaxLeasesPerProxy,
		MaxLeaseTTL:       lease.DefaultMaxTTL,
		DefaultLeaseTTL:   lease.DefaultDefaultTTL,
		CooldownWindow:    lease.DefaultCooldownWindow,
		SweepInterval:     lease.DefaultSweepInterval,
		QueueMaxPerFlow:   DefaultQueueMaxPerFlow,
		QueueMaxPerBand:   DefaultQueueMaxPerBand,
		QueueMax:          DefaultQueueMax,
		QueueRetryAfter:   flowcontrol.DefaultRetryAfter,
	}
}

// AddFlags registers the leasing flags on fs.
func (o *LeasingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DiscoveryAddr, "discovery-bind-address", o.DiscoveryAddr, "Address of the HTTP discovery (lease) API; \"0\" disables it.")
	fs.StringVar(&o.DiscoveryTokenFile, "discovery-token-file", o.DiscoveryTokenFile, "File holding the discovery API's bearer token. Unset: $"+DiscoveryTokenEnv+"; with neither, authentication is OFF (logged as a warning).")
	fs.DurationVar(&o.DiscoveryMaxWait, "discovery-max-wait", o.DiscoveryMaxWait, "Longest waitSeconds a POST /v1/leases may ask for.")
	fs.IntVar(&o.MaxLeasesPerProxy, "max-leases-per-proxy", o.MaxLeasesPerProxy, "Live leases one proxy may hold at once (1: exclusive).")
	fs.DurationVar(&o.MaxLeaseTTL, "max-lease-ttl", o.MaxLeaseTTL, "Longest TTL a lease may be granted or renewed for.")
	fs.DurationVar(&o.DefaultLeaseTTL, "default-lease-ttl", o.DefaultLeaseTTL, "TTL of a lease that asks for none.")
	fs.DurationVar(&o.CooldownWindow, "cooldown-window", o.CooldownWindow, "How long a (proxy, target) pair is skipped after a rate_limited or banned report, and how long an ended lease stays reportable.")
	fs.DurationVar(&o.SweepInterval, "lease-sweep-interval", o.SweepInterval, "How often ended leases and cooldowns are freed from memory (expiry itself is checked on every read).")
	fs.IntVar(&o.QueueMaxPerFlow, "lease-queue-max-per-flow", o.QueueMaxPerFlow, "Waiting lease requests one flow (token identity or Kubernetes user) may have in one priority band.")
	fs.IntVar(&o.QueueMaxPerBand, "lease-queue-max-per-band", o.QueueMaxPerBand, "Waiting lease requests per priority band.")
	fs.IntVar(&o.QueueMax, "lease-queue-max", o.QueueMax, "Waiting lease requests in all.")
	fs.DurationVar(&o.QueueRetryAfter, "lease-queue-retry-after", o.QueueRetryAfter, "Retry-After of a lease request rejected because a wait queue is full.")
}

// Validate reports every invalid leasing option.
func (o *LeasingOptions) Validate() error {
	var errs []error
	if o.DiscoveryAddr != "0" {
		if err := validateBindAddress(o.DiscoveryAddr); err != nil {
			errs = append(errs, fmt.Errorf("--discovery-bind-address: %w", err))
		}
	}
	if o.MaxLeasesPerProxy < 1 {
		errs = append(errs, fmt.Errorf("--max-leases-per-proxy: must be at least 1, got %d", o.MaxLeasesPerProxy))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--discovery-max-wait", o.DiscoveryMaxWait},
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
		{"--lease-queue-max-per-flow", o.QueueMaxPerFlow},
		{"--lease-queue-max-per-band", o.QueueMaxPerBand},
		{"--lease-queue-max", o.QueueMax},
	} {
		if q.v < 1 {
			errs = append(errs, fmt.Errorf("%s: must be at least 1, got %d", q.flag, q.v))
		}
	}
	return errors.Join(errs...)
}

// DiscoveryToken returns the bearer token of the discovery API: the
// content of --discovery-token-file, else $PROXY_OPERATOR_DISCOVERY_TOKEN
// (read through getenv), else "" (authentication off). A token file that is
// set but empty is an error rather than a silent "auth off".
func (o *LeasingOptions) DiscoveryToken(getenv func(string) string) (string, error) {
	if o.DiscoveryTokenFile == "" {
		return strings.TrimSpace(getenv(DiscoveryTokenEnv)), nil
	}
	data, err := os.ReadFile(o.DiscoveryTokenFile)
	if err != nil {
		return "", fmt.Errorf("reading --discovery-token-file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("--discovery-token-file %s is empty (to turn authentication off, set no token at all)", o.DiscoveryTokenFile)
	}
	return token, nil
}

// storeOptions are the lease store's options.
func (o *LeasingOptions) storeOptions() lease.Options {
	return lease.Options{
		MaxLeasesPerProxy: o.MaxLeasesPerProxy,
		MaxTTL:            o.MaxLeaseTTL,
		DefaultTTL:        o.DefaultLeaseTTL,
		CooldownWindow:    o.CooldownWindow,
		SweepInterval:     o.SweepInterval,
	}
}

// validateBindAddress accepts host:port with an optional host and a port in
// 0..65535 (0: any free port).
func validateBindAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port must be a number in 0..65535", addr)
	}
	return nil
}
