package discovery

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// ServingOptions are the flags of the HTTP discovery API: where it listens,
// whose tokens it accepts and how long a request may wait.
type ServingOptions struct {
	// Addr serves the HTTP discovery API ("0" disables it).
	Addr string
	// TokenFile holds the accepted bearer tokens, one "token,identity" line
	// each, or a single bare token (identity DefaultIdentity); see
	// ParseTokens. Empty: one token from $PROXY_OPERATOR_DISCOVERY_TOKEN;
	// with neither, authentication is off and the server says so loudly.
	TokenFile string
	// MaxWait caps waitSeconds of POST /v1/leases.
	MaxWait time.Duration
}

// DefaultServingOptions returns the defaults.
func DefaultServingOptions() ServingOptions {
	return ServingOptions{Addr: DefaultAddr, MaxWait: DefaultMaxWait}
}

// Enabled reports whether the API is served (--discovery-bind-address other
// than "0").
func (o *ServingOptions) Enabled() bool { return o.Addr != "0" }

// AddFlags registers the --discovery-* flags.
func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "discovery-bind-address", o.Addr, "Address of the HTTP discovery (lease) API; \"0\" disables it.")
	fs.StringVar(&o.TokenFile, "discovery-token-file", o.TokenFile, "File of the discovery API's bearer tokens: one token,identity line each (# comments), or a single bare token (identity \""+DefaultIdentity+"\"). Unset: one token from $"+TokenEnv+"; with neither, authentication is OFF (logged as a warning).")
	fs.DurationVar(&o.MaxWait, "discovery-max-wait", o.MaxWait, "Longest waitSeconds a POST /v1/leases may ask for.")
}

// Validate reports every invalid option.
func (o *ServingOptions) Validate() error {
	var errs []error
	if o.Enabled() {
		if err := validateBindAddress(o.Addr); err != nil {
			errs = append(errs, fmt.Errorf("--discovery-bind-address: %w", err))
		}
	}
	if o.MaxWait <= 0 {
		errs = append(errs, fmt.Errorf("--discovery-max-wait: must be positive, got %s", o.MaxWait))
	}
	return errors.Join(errs...)
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
