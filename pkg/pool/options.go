package pool

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// DefaultDrainTimeout bounds how long a leased Proxy drains before the
// pool deletes it anyway.
const DefaultDrainTimeout = 10 * time.Minute

// Options are the --pool-* flags.
type Options struct {
	// DrainTimeout is --pool-drain-timeout.
	DrainTimeout time.Duration
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options { return Options{DrainTimeout: DefaultDrainTimeout} }

// AddFlags registers the --pool-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.DrainTimeout, "pool-drain-timeout", o.DrainTimeout, "How long a ProxyPool lets a leased Proxy it removes drain (no new leases, the live ones renew) before deleting it anyway.")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	if o.DrainTimeout <= 0 {
		return fmt.Errorf("--pool-drain-timeout: must be positive, got %s", o.DrainTimeout)
	}
	return nil
}
