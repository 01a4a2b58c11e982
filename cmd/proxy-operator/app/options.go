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

	// Election is the leader election (its --leader-elect* flags).
	Election serving.Election

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

	// Each part's own options, with its own flags (--gcp-*, --gc-*,
	// --discovery-*, --gateway-*, --lease-checkpoint-*, --lease-signing-*,
	// --proxy-auth-*, --pool-*, --serving-cert-*, --apiserver-*…): the
	// providers, the health engine, the orphan collector, the lease store
	// and queue, the HTTP lease API, the gateway, the serving label, the
	// checkpoint, signed lease IDs, proxy auth, ProxyPools, the operator's
	// own certificate and the aggregated API server. The checkpoint, the
	// signing key, proxy auth and the certificate live in Namespace.
	Kubernetes kubernetes.Options
	GCP        gcp.Options
	Health     health.Settings
	GC         gc.Options
	Leasing    leasing.Options
	Discovery  discovery.ServingOptions
	Gateway    gateway.Options
	Serving    serving.Options
	Checkpoint checkpoint.Options
	LeaseIDs   leaseid.Options
	ProxyAuth  proxyauth.Options
	Pool       pool.Options
	Certs      certs.Options
	APIServer  *apiserver.Options

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
		Election:         serving.DefaultElection(),
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
	fs.StringSliceVar(&o.Providers, "providers", o.Providers, "Enabled providers (comma-separated). Known: "+strings.Join(knownProviders(), ", ")+".")
	fs.StringVar(&o.InstanceTag, "instance-tag", o.InstanceTag, "Tag marking the instances this deployment owns; its garbage collector lists and deletes only these (default: derived from the kube-system namespace's UID and --namespace, unique per installation; pass proxy-operator to keep the tag of versions before it was derived).")
	fs.StringSliceVar(&o.WatchNamespaces, "watch-namespaces", o.WatchNamespaces, "Serve and reconcile only the Proxies of these namespaces (comma-separated; default: the whole cluster).")
	fs.DurationVar(&o.ReconcileTimeout, "reconcile-timeout", o.ReconcileTimeout, "Upper bound of one reconcile, provider calls included.")
	for _, part := range []interface{ AddFlags(*pflag.FlagSet) }{&o.Election, &o.Intervals, &o.Kubernetes, &o.GCP, &o.Health,
		&o.GC, &o.Discovery, &o.Gateway, &o.Serving, &o.Certs, &o.Checkpoint, &o.LeaseIDs, &o.ProxyAuth, &o.Pool, &o.Leasing} {
		part.AddFlags(fs)
	}
	fs.AddFlagSet(o.APIServer.FlagSet())

	gofs := flag.NewFlagSet("controller-runtime", flag.ContinueOnError)
	config.RegisterFlags(gofs) // --kubeconfig, bound to controller-runtime's loader
	o.Zap.BindFlags(gofs)
	fs.AddGoFlagSet(gofs)
}

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	o.Complete()
	// errors.Join drops the nil ones.
	errs := []error{o.Election.Validate(), validateProviders(o.Providers), o.Intervals.Validate(), o.Kubernetes.Validate(),
		o.Health.Validate(), o.GC.Validate(), o.GC.CheckScope(o.WatchNamespaces), o.Serving.Validate(),
		o.Gateway.Validate(), o.Leasing.Validate(), o.Pool.Validate()}
	if slices.Contains(o.Providers, gcp.Name) {
		errs = append(errs, o.GCP.Validate())
		if o.InstanceTag != "" && !gcp.ValidTag(o.InstanceTag) {
			errs = append(errs, fmt.Errorf("--instance-tag %q: the gcp provider stores it as a GCE label value (at most 63 lowercase letters, digits, '-' or '_')", o.InstanceTag))
		}
	}
	// An empty --instance-tag is derived at start (instanceTag).
	if msgs := validation.IsValidLabelValue(o.InstanceTag); o.InstanceTag != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--instance-tag %q: %s", o.InstanceTag, strings.Join(msgs, "; ")))
	}
	if o.ReconcileTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--reconcile-timeout: must be positive, got %s", o.ReconcileTimeout))
	}
	for _, ns := range o.WatchNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--watch-namespaces %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if msgs := validation.IsDNS1123Label(o.Namespace); o.Namespace != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--namespace %q: %s", o.Namespace, strings.Join(msgs, "; ")))
	}
	if err := o.Discovery.Validate(); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, o.Discovery.ValidateTLS(o.Certs.Enabled()))
	}
	for _, c := range []interface {
		Enabled() bool
		Validate() error
	}{&o.Certs, &o.Checkpoint, &o.LeaseIDs, &o.ProxyAuth} {
		if c.Enabled() {
			errs = append(errs, c.Validate())
		}
	}
	if o.APIServer == nil {
		errs = append(errs, errors.New("aggregated API server options: nil (use NewOptions)"))
	} else if o.APIServer.Enabled() {
		errs = append(errs, o.APIServer.Validate())
	}
	return errors.Join(errs...)
}

// validateProviders: at least one, each known, none twice.
func validateProviders(names []string) error {
	if len(names) == 0 {
		return errors.New("--providers: at least one provider must be enabled")
	}
	var errs []error
	for i, p := range names {
		switch {
		case p == "":
			errs = append(errs, errors.New("--providers: empty name"))
		case slices.Contains(names[:i], p):
			errs = append(errs, fmt.Errorf("--providers: %q listed twice", p))
		case !slices.Contains(knownProviders(), p):
			errs = append(errs, fmt.Errorf("--providers: unknown provider %q (known: %s)", p, strings.Join(knownProviders(), ", ")))
		}
	}
	return errors.Join(errs...)
}

// Complete points the parts that keep their state in the operator's
// namespace (the certificate, the checkpoint, the signing key, the proxy
// auth key) at --namespace. Validate and Run call it.
func (o *Options) Complete() {
	ns := o.Namespace
	o.Certs.Namespace, o.Checkpoint.Namespace, o.LeaseIDs.Namespace, o.ProxyAuth.Namespace = ns, ns, ns, ns
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
