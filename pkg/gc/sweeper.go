package gc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// Providers are the enabled providers.
type Providers interface {
	// All returns the providers by name; the map is the caller's. It must
	// be safe for concurrent use.
	All() map[string]provider.Provider
}

// Recorder observes the collector; pkg/metrics satisfies it. Methods must
// not block.
type Recorder interface {
	// GCDeleted counts one orphan deleted from providerName.
	GCDeleted(providerName string)
	// GCSweep records one sweep's Result (as a string: the recorder's
	// package must not import this one); at is when it ended.
	GCSweep(result string, at time.Time)
}

// Config is what New needs.
type Config struct {
	Options
	// Reader lists Proxies (the manager's cache). Required.
	Reader client.Reader
	// Providers are swept in name order. Required.
	Providers Providers
	// Tag is the --instance-tag of this deployment. Required.
	Tag string
	// Namespaces the cache is restricted to; empty means cluster-wide.
	Namespaces []string
	// Clock drives the timer and instance ages (default: real).
	Clock clock.WithTicker
	// Recorder receives metrics; nil records nothing.
	Recorder Recorder
}

// Sweeper is the collector. Add it to a manager; it runs on the leader only.
type Sweeper struct {
	cfg Config

	mu sync.Mutex
	// deleted are the orphans whose Delete the provider accepted, by
	// provider and providerID, and when: a provider may list an instance
	// being deleted as merely stopped (Compute Engine shows STOPPING), and
	// deleting it again would count it twice. After redeleteAfter it is
	// deleted again (a delete the cloud accepted and then dropped).
	deleted map[string]time.Time
}

// redeleteAfter is how long an orphan whose Delete was accepted is left to
// disappear before it is deleted again.
const redeleteAfter = 10 * time.Minute

// New returns a Sweeper for cfg. It refuses invalid options, a missing
// dependency, and a namespace-restricted cache without AllowNamespaced.
func New(cfg Config) (*Sweeper, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.CheckScope(cfg.Namespaces); err != nil {
		errs = append(errs, err)
	}
	if cfg.Reader == nil {
		errs = append(errs, errors.New("a Proxy reader is required"))
	}
	if cfg.Providers == nil {
		errs = append(errs, errors.New("the providers are required"))
	}
	if cfg.Tag == "" {
		errs = append(errs, errors.New("the instance tag is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("orphan collector: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Recorder == nil {
		cfg.Recorder = nopRecorder{}
	}
	return &Sweeper{cfg: cfg, deleted: map[string]time.Time{}}, nil
}

// NeedLeaderElection is true: deleting is for one writer.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start sweeps every Interval until ctx ends, the first sweep one full
// Interval after start: a freshly started operator (or a new leader) lets
// the reconciler record in-flight creates first. A disabled collector
// returns at once.
func (s *Sweeper) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("gc")
	if !s.cfg.Enabled() {
		logger.Info("orphan collector disabled (--gc-interval=0)")
		return nil
	}
	logger.Info("orphan collector started", "interval", s.cfg.Interval, "minAge", s.cfg.MinAge, "dryRun", s.cfg.DryRun)
	ctx = log.IntoContext(ctx, logger)
	t := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			s.Sweep(ctx)
		}
	}
}

type nopRecorder struct{}

func (nopRecorder) GCDeleted(string)          {}
func (nopRecorder) GCSweep(string, time.Time) {}
