package gc

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Options configure the collector.
type Options struct {
	// Interval between sweeps; the first sweep is one full Interval after
	// start. 0 disables the collector.
	Interval time.Duration
	// MinAge spares instances younger than this: one being created may not
	// be recorded in its Proxy's status yet.
	MinAge time.Duration
	// DryRun logs what would be deleted and deletes nothing.
	DryRun bool
	// AllowNamespaced lets the collector run on a cache restricted to some
	// namespaces, where every Proxy outside them looks orphaned.
	AllowNamespaced bool
}

// DefaultOptions returns the production defaults.
func DefaultOptions() Options {
	return Options{Interval: 10 * time.Minute, MinAge: 10 * time.Minute}
}

// AddFlags registers the --gc-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "gc-interval", o.Interval, "Time between orphan garbage-collection sweeps (the first one a full interval after start); 0 disables the collector.")
	fs.DurationVar(&o.MinAge, "gc-min-age", o.MinAge, "Instances younger than this are never garbage-collected (they may be mid-create).")
	fs.BoolVar(&o.DryRun, "gc-dry-run", o.DryRun, "Log the orphaned instances the collector would delete, and delete none.")
	fs.BoolVar(&o.AllowNamespaced, "gc-allow-namespaced", o.AllowNamespaced, "Run the collector even though the cache watches only some namespaces (instances of Proxies in other namespaces would be deleted).")
}

// Enabled reports whether the collector runs.
func (o *Options) Enabled() bool { return o.Interval > 0 }

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("--gc-interval: must not be negative (0 disables the collector), got %s", o.Interval))
	}
	if o.MinAge <= 0 {
		errs = append(errs, fmt.Errorf("--gc-min-age: must be positive, got %s", o.MinAge))
	}
	return errors.Join(errs...)
}

// CheckScope reports whether the collector may run on a cache restricted to
// namespaces (empty: the whole cluster). A restricted cache sees only some
// Proxies, so the live set would be incomplete and instances of the others
// would be "orphans": refused unless AllowNamespaced.
func (o *Options) CheckScope(namespaces []string) error {
	if !o.Enabled() || len(namespaces) == 0 || o.AllowNamespaced {
		return nil
	}
	return fmt.Errorf("--gc-interval: the orphan collector would see only the Proxies of namespaces %s and delete the instances of every other Proxy; "+
		"pass --gc-allow-namespaced if no other Proxies own instances with this --instance-tag, or --gc-interval=0 to disable it",
		strings.Join(namespaces, ", "))
}
