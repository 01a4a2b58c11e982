package app

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/gateway"
	"github.com/proxy-operator/proxy-operator/pkg/gc"
	"github.com/proxy-operator/proxy-operator/pkg/health"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/pool"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
	"github.com/proxy-operator/proxy-operator/pkg/serving"
)

// Options is every setting of the operator binary.
type Options struct {
	// Namespace is the operator's own: its certificate and token Secrets and
	// its CA ConfigMap live there (default: the pod's namespace).
	Namespace string

	// MetricsAddr serves /metrics ("0" disables).
	MetricsAddr string
	// HealthProbeAddr serves /healthz and /readyz ("0" disables).
	HealthProbeAddr string
	// PprofAddr serves net/http/pprof ("0", the default, disables): for
	// profiling a running operator, never exposed by the manifests.
	PprofAddr string

	// LeaderElection makes the reconciler, health engine, GC and the lease
	// APIs run in one replica at a time (the others stand by).
	LeaderElection bool
	// LeaderElectionID names the Lease.
	LeaderElectionID string
	// LeaderElectionNamespace holds the Lease; required out of cluster.
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod time the election: a
	// crashed leader is replaced within about LeaseDuration + RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// Providers are the enabled provider names.
	Providers []string
	// InstanceTag marks the instances of this deployment (ListByTag, GC).
	InstanceTag string
	// WatchNamespaces restricts the cache (so the Proxies served and
	// reconciled) to these namespaces; empty watches the whole cluster.
	WatchNamespaces []string

	// Intervals are the reconciler's requeue delays.
	Intervals controller.Intervals
	// ReconcileTimeout bounds one reconcile, provider calls included, so a
	// hung provider cannot hold a worker forever.
	ReconcileTimeout time.Duration

	// Kubernetes configures the "kubernetes" provider.
	Kubernetes kubernetes.Options
	// GCP configures the "gcp" provider (its own --gcp-* flags).
	GCP gcp.Options

	// Health configures the health engine.
	Health health.Settings

	// GC configures the orphan garbage collector (its own --gc-* flags).
	GC gc.Options

	// Leasing configures the lease store and the wait queue of both lease
	// APIs; Discovery the HTTP discovery API (its --discovery-* flags).
	Leasing   leasing.Options
	Discovery discovery.ServingOptions
	// Gateway is the forward-proxy gateway (its --gateway-* flags).
	Gateway gateway.Options
	// Serving labels the pod that serves leases (--serving-pod-selector).
	Serving serving.Options
	// Checkpoint keeps leases across restarts (its --lease-checkpoint-*
	// flags), in the operator's namespace.
	Checkpoint checkpoint.Options
	// LeaseIDs signs lease IDs so that leases a crash lost since the last
	// checkpoint are taken back (its --lease-signing-* flags).
	LeaseIDs leaseid.Options
	// ProxyAuth makes every proxy the operator runs check a live lease's
	// credentials.
	ProxyAuth proxyauth.Options
	// Pool is the ProxyPool controller's (its --pool-* flags).
	Pool pool.Options
	// Certs is the operator's own CA and serving certificate (its
	// --serving-cert-* flags), used by each lease API without certificate
	// files of its own.
	Certs certs.Options
	// APIServer configures the aggregated ProxyLease API server (its own
	// flag set, every flag prefixed --apiserver-; --apiserver-secure-port=0
	// disables it).
	APIServer *apiserver.Options

	// Zap configures logging (--zap-* flags from controller-runtime).
	Zap zap.Options
}

// knownProviders are the providers this binary can build.
func knownProviders() []string { return []string{gcp.Name, kubernetes.Name} }

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Namespace:        podNamespace(),
		MetricsAddr:      ":8080",
		HealthProbeAddr:  ":8081",
		PprofAddr:        "0",
		LeaderElectionID: "proxy-operator.crawl.example.com",
		LeaseDuration:    15 * time.Second,
		RenewDeadline:    10 * time.Second,
		RetryPeriod:      2 * time.Second,
		Providers:        []string{kubernetes.Name},
		Intervals:        controller.DefaultIntervals(),
		ReconcileTimeout: 2 * time.Minute,
		GCP:              gcp.DefaultOptions(),
		GC:               gc.DefaultOptions(),
		Health:           health.DefaultSettings(),
		Leasing:          leasing.DefaultOptions(),
		Discovery:        discovery.DefaultServingOptions(),
		Gateway:          gateway.DefaultOptions(),
		Serving:          serving.NewOptions(),
		Certs:            certs.DefaultOptions(),
		Checkpoint:       checkpoint.DefaultOptions(),
		Pool:             pool.DefaultOptions(),
		ProxyAuth:        proxyauth.DefaultOptions(),
		Kubernetes:       kubernetes.DefaultOptions(),
		APIServer:        apiserver.NewOptions(),
		Zap:              zap.Options{Development: false},
	}
}

// AddFlags registers the options on fs. --kubeconfig is controller-runtime's
// own flag (registered on the Go flag set by its config package and read by
// its loader), added here rather than redefined so the two cannot clash; the
// --zap-* logging flags come from controller-runtime the same way.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "The operator's own namespace, of its certificate and token Secrets (default: the pod's; required out of a cluster with --serving-cert-secret or --discovery-token-secret).")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address of the /metrics endpoint; \"0\" disables it.")
	fs.StringVar(&o.HealthProbeAddr, "health-probe-bind-address", o.HealthProbeAddr, "Address of the /healthz and /readyz endpoints; \"0\" disables them.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, "Address of the Go profiler (/debug/pprof/); \"0\" (the default) disables it. Unauthenticated: bind it to localhost.")
	fs.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "Elect a leader: only it reconciles and serves leases; other replicas stand by (not ready, lease calls 503).")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader-election Lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader-election Lease (default: the pod's namespace; required out of cluster).")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration, "How long a standby waits after the leader's last renewal before taking over (a crashed leader is replaced within about this plus the retry period).")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline, "How long the leader keeps retrying a renewal before it gives up leading (and exits).")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod, "How often candidates try to acquire or renew leadership.")
	fs.StringSliceVar(&o.Providers, "providers", o.Providers, "Enabled providers (comma-separated). Known: "+strings.Join(knownProviders(), ", ")+".")
	fs.StringVar(&o.InstanceTag, "instance-tag", o.InstanceTag, "Tag marking the instances this deployment owns; its garbage collector lists and deletes only these (default: derived from the kube-system namespace's UID and --namespace, unique per installation; pass proxy-operator to keep the tag of versions before it was derived).")
	fs.StringSliceVar(&o.WatchNamespaces, "watch-namespaces", o.WatchNamespaces, "Serve and reconcile only the Proxies of these namespaces (comma-separated; default: the whole cluster).")
	fs.DurationVar(&o.Intervals.ProvisioningPoll, "provisioning-poll-interval", o.Intervals.ProvisioningPoll, "How often an instance being created is polled.")
	fs.DurationVar(&o.Intervals.DeletionPoll, "deletion-poll-interval", o.Intervals.DeletionPoll, "How often an instance being deleted is polled.")
	fs.DurationVar(&o.Intervals.DriftPoll, "drift-poll-interval", o.Intervals.DriftPoll, "How often a running instance is re-checked.")
	fs.DurationVar(&o.Intervals.QuotaRetry, "quota-retry-interval", o.Intervals.QuotaRetry, "Wait after the provider reports exhausted quota.")
	fs.DurationVar(&o.Intervals.RequeueNow, "requeue-now-interval", o.Intervals.RequeueNow, "Short delay standing in for an immediate requeue.")
	fs.DurationVar(&o.Intervals.CreateRetry, "create-retry-interval", o.Intervals.CreateRetry, "First wait after a create the provider accepted and then failed (doubles per failure in a row, up to --quota-retry-interval).")
	fs.DurationVar(&o.ReconcileTimeout, "reconcile-timeout", o.ReconcileTimeout, "Upper bound of one reconcile, provider calls included.")
	o.Kubernetes.AddFlags(fs)
	o.GCP.AddFlags(fs)

	o.Health.AddFlags(fs)
	o.GC.AddFlags(fs)
	o.Discovery.AddFlags(fs)
	o.Gateway.AddFlags(fs)
	o.Serving.AddFlags(fs)
	o.Certs.AddFlags(fs)
	o.Checkpoint.AddFlags(fs)
	o.LeaseIDs.AddFlags(fs)
	o.ProxyAuth.AddFlags(fs)
	o.Pool.AddFlags(fs)
	o.Leasing.AddFlags(fs)
	fs.AddFlagSet(o.APIServer.FlagSet())

	gofs := flag.NewFlagSet("controller-runtime", flag.ContinueOnError)
	config.RegisterFlags(gofs) // --kubeconfig, bound to controller-runtime's loader
	o.Zap.BindFlags(gofs)
	fs.AddGoFlagSet(gofs)
}

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	if o.LeaderElection {
		// client-go's rule: LeaseDuration > RenewDeadline > 1.2 × RetryPeriod.
		if o.RetryPeriod <= 0 || o.RenewDeadline <= o.RetryPeriod*12/10 || o.LeaseDuration <= o.RenewDeadline {
			errs = append(errs, fmt.Errorf("--leader-election-lease-duration (%s) must exceed --leader-election-renew-deadline (%s), which must exceed 1.2 × --leader-election-retry-period (%s)",
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
		}
		if o.LeaderElectionID == "" {
			errs = append(errs, errors.New("--leader-election-id: required with --leader-elect"))
		} else if msgs := validation.IsDNS1123Subdomain(o.LeaderElectionID); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-election-id %q: %s", o.LeaderElectionID, strings.Join(msgs, "; ")))
		}
	}
	if len(o.Providers) == 0 {
		errs = append(errs, errors.New("--providers: at least one provider must be enabled"))
	}
	seen := map[string]bool{}
	for _, p := range o.Providers {
		switch {
		case p == "":
			errs = append(errs, errors.New("--providers: empty name"))
		case seen[p]:
			errs = append(errs, fmt.Errorf("--providers: %q listed twice", p))
		case !slices.Contains(knownProviders(), p):
			errs = append(errs, fmt.Errorf("--providers: unknown provider %q (known: %s)", p, strings.Join(knownProviders(), ", ")))
		}
		seen[p] = true
	}
	if seen[gcp.Name] {
		if err := o.GCP.Validate(); err != nil {
			errs = append(errs, err)
		}
		if o.InstanceTag != "" && !gcp.ValidTag(o.InstanceTag) {
			errs = append(errs, fmt.Errorf("--instance-tag %q: the gcp provider stores it as a GCE label value (at most 63 lowercase letters, digits, '-' or '_')", o.InstanceTag))
		}
	}
	// An empty --instance-tag is derived at start (instanceTag).
	if msgs := validation.IsValidLabelValue(o.InstanceTag); o.InstanceTag != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--instance-tag %q: %s", o.InstanceTag, strings.Join(msgs, "; ")))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--provisioning-poll-interval", o.Intervals.ProvisioningPoll},
		{"--deletion-poll-interval", o.Intervals.DeletionPoll},
		{"--drift-poll-interval", o.Intervals.DriftPoll},
		{"--quota-retry-interval", o.Intervals.QuotaRetry},
		{"--requeue-now-interval", o.Intervals.RequeueNow},
		{"--create-retry-interval", o.Intervals.CreateRetry},
		{"--reconcile-timeout", o.ReconcileTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", d.flag, d.v))
		}
	}
	if err := o.Kubernetes.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range o.WatchNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--watch-namespaces %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if err := o.Health.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.GC.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.GC.CheckScope(o.WatchNamespaces); err != nil {
		errs = append(errs, err)
	}
	if err := o.Discovery.Validate(); err != nil {
		errs = append(errs, err)
	} else if err := o.Discovery.ValidateTLS(o.Certs.Enabled()); err != nil {
		errs = append(errs, err)
	}
	if err := o.Serving.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Gateway.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Namespace != "" {
		if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--namespace %q: %s", o.Namespace, strings.Join(msgs, "; ")))
		}
	}
	if c := o.certsOptions(); c.Enabled() {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c := o.checkpointOptions(); c.Enabled() {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c := o.leaseIDOptions(); c.Enabled() {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c := o.proxyAuthOptions(); c.Enabled() {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := o.Leasing.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Pool.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.APIServer == nil {
		errs = append(errs, errors.New("aggregated API server options: nil (use NewOptions)"))
	} else if o.APIServer.Enabled() {
		if err := o.APIServer.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// certsOptions are the --serving-cert-* options in the operator's namespace.
func (o *Options) certsOptions() certs.Options {
	c := o.Certs
	c.Namespace = o.Namespace
	return c
}

// checkpointOptions are the --lease-checkpoint-* options in the operator's
// namespace.
func (o *Options) checkpointOptions() checkpoint.Options {
	c := o.Checkpoint
	c.Namespace = o.Namespace
	return c
}

// leaseIDOptions are the --lease-signing-* options in the operator's
// namespace.
func (o *Options) leaseIDOptions() leaseid.Options {
	c := o.LeaseIDs
	c.Namespace = o.Namespace
	return c
}

// proxyAuthOptions are the --proxy-auth-* options in the operator's
// namespace.
func (o *Options) proxyAuthOptions() proxyauth.Options {
	c := o.ProxyAuth
	c.Namespace = o.Namespace
	return c
}

// inClusterNamespaceFile is where a pod finds its own namespace.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// podNamespace is the pod's namespace, "" outside a pod.
func podNamespace() string {
	b, err := os.ReadFile(inClusterNamespaceFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
