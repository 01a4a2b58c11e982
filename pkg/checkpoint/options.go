package checkpoint

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults.
const (
	DefaultInterval = time.Second
)

// Options are the --lease-checkpoint-* flags.
type Options struct {
	// SecretName names the checkpoint Secret (its extra shards are
	// <name>-<generation>-<n>); "" turns checkpoints off.
	SecretName string
	// Namespace is the operator's own, set by the composition root.
	Namespace string
	// Interval is the shortest time between two writes.
	Interval time.Duration
}

// DefaultOptions returns the defaults (off).
func DefaultOptions() Options { return Options{Interval: DefaultInterval} }

// Enabled reports whether leases are checkpointed.
func (o *Options) Enabled() bool { return o.SecretName != "" }

// AddFlags registers the --lease-checkpoint-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretName, "lease-checkpoint-secret", o.SecretName, "Secret (in the operator's namespace) that keeps leases, cooldowns and resourceVersions across restarts, loaded at start and written at most once per --lease-checkpoint-interval while something changed; empty: leases live in memory only.")
	fs.DurationVar(&o.Interval, "lease-checkpoint-interval", o.Interval, "Shortest time between two lease checkpoints.")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	// Shards append -<generation>-<n>: keep room for them.
	if msgs := validation.IsDNS1123Subdomain(o.SecretName + "-18446744073709551615-99"); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--lease-checkpoint-secret %q: %s", o.SecretName, strings.Join(msgs, "; ")))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--lease-checkpoint-secret: the operator's namespace is unknown (give --namespace out of a cluster)"))
	}
	if o.Interval <= 0 {
		errs = append(errs, fmt.Errorf("--lease-checkpoint-interval: must be positive, got %s", o.Interval))
	}
	return errors.Join(errs...)
}
