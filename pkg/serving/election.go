package serving

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Election is the operator's leader election (its --leader-elect* flags):
// the reconciler, health engine, GC and the lease APIs run in one replica
// at a time, the others stand by.
type Election struct {
	// Enabled elects a leader (--leader-elect).
	Enabled bool
	// ID names the Lease.
	ID string
	// Namespace holds the Lease (default: the operator's namespace).
	Namespace string
	// LeaseDuration, RenewDeadline and RetryPeriod time the election: a
	// crashed leader is replaced within about LeaseDuration + RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultElection returns the defaults (off).
func DefaultElection() Election {
	return Election{ID: "proxy-operator.crawl.example.com", LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
}

// AddFlags registers the --leader-elect* flags on fs.
func (o *Election) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "leader-elect", o.Enabled, "Elect a leader: only it reconciles and serves leases; other replicas stand by (not ready, lease calls 503).")
	fs.StringVar(&o.ID, "leader-election-id", o.ID, "Name of the leader-election Lease.")
	fs.StringVar(&o.Namespace, "leader-election-namespace", o.Namespace, "Namespace of the leader-election Lease (default: the pod's namespace; required out of cluster).")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration, "How long a standby waits after the leader's last renewal before taking over (a crashed leader is replaced within about this plus the retry period).")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline, "How long the leader keeps retrying a renewal before it gives up leading (and exits).")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod, "How often candidates try to acquire or renew leadership.")
}

// Validate reports every invalid option at once (none when off).
func (o *Election) Validate() error {
	if !o.Enabled {
		return nil
	}
	var errs []error
	// client-go's rule: LeaseDuration > RenewDeadline > 1.2 × RetryPeriod.
	if o.RetryPeriod <= 0 || o.RenewDeadline <= o.RetryPeriod*12/10 || o.LeaseDuration <= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("--leader-election-lease-duration (%s) must exceed --leader-election-renew-deadline (%s), which must exceed 1.2 × --leader-election-retry-period (%s)",
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
	}
	if o.ID == "" {
		errs = append(errs, errors.New("--leader-election-id: required with --leader-elect"))
	} else if msgs := validation.IsDNS1123Subdomain(o.ID); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--leader-election-id %q: %s", o.ID, strings.Join(msgs, "; ")))
	}
	return errors.Join(errs...)
}

// LeaseNamespace is where the Lease lives: Namespace, else operatorNamespace.
func (o *Election) LeaseNamespace(operatorNamespace string) string {
	if o.Namespace != "" {
		return o.Namespace
	}
	return operatorNamespace
}

// Lock is the lock of a replica running in pod podName of podNamespace:
// controller-runtime's Lease, taken only while the pod is Ready (ReadyLock).
// Nil when the election is off or the replica runs outside a pod: the
// manager then makes its own.
func (o *Election) Lock(cfg *rest.Config, podName, podNamespace string) (resourcelock.Interface, error) {
	if !o.Enabled || podName == "" || podNamespace == "" {
		return nil, nil
	}
	return NewLock(cfg, LockOptions{Namespace: o.LeaseNamespace(podNamespace), Name: o.ID,
		PodName: podName, PodNamespace: podNamespace, RenewDeadline: o.RenewDeadline})
}
