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
	// DefaultJournalSegments: at one write a second, a snapshot at least
	// every five minutes while leases change.
	DefaultJournalSegments = 300
	maxJournalSegments     = 10000
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
	// JournalSegments bounds the journal between two snapshots (Secrets a
	// takeover reads besides the snapshot); 0 writes every change as a
	// snapshot.
	JournalSegments int
}

// DefaultOptions returns the defaults (off).
func DefaultOptions() Options {
	return Options{Interval: DefaultInterval, JournalSegments: DefaultJournalSegments}
}

// Enabled reports whether leases are checkpointed.
func (o *Options) Enabled() bool { return o.SecretName != "" }

// AddFlags registers the --lease-checkpoint-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretName, "lease-checkpoint-secret", o.SecretName, "Secret (in the operator's namespace) that keeps leases, cooldowns and resourceVersions across restarts, loaded at start and written at most once per --lease-checkpoint-interval while something changed; empty: leases live in memory only.")
	fs.DurationVar(&o.Interval, "lease-checkpoint-interval", o.Interval, "Shortest time between two lease checkpoints.")
	fs.IntVar(&o.JournalSegments, "lease-checkpoint-journal-segments", o.JournalSegments, "Most journal Secrets (each one write's changes) between two snapshots of every lease; a snapshot is also written when the journal outgrows the last one, and at shutdown. 0: every write is a snapshot.")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	// Shards append -<generation>-<n>, journal segments -<generation>-j<n>:
	// keep room for them.
	if msgs := validation.IsDNS1123Subdomain(o.SecretName + "-18446744073709551615-j10000"); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--lease-checkpoint-secret %q: %s", o.SecretName, strings.Join(msgs, "; ")))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--lease-checkpoint-secret: the operator's namespace is unknown (give --namespace out of a cluster)"))
	}
	if o.JournalSegments < 0 || o.JournalSegments > maxJournalSegments {
		errs = append(errs, fmt.Errorf("--lease-checkpoint-journal-segments: must be within 0..%d, got %d", maxJournalSegments, o.JournalSegments))
	}
	if o.Interval <= 0 {
		errs = append(errs, fmt.Errorf("--lease-checkpoint-interval: must be positive, got %s", o.Interval))
	}
	return errors.Join(errs...)
}
