package apiserver

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/pflag"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	netutils "k8s.io/utils/net"
)

// FlagPrefix starts every flag of this package, so that the generic API
// server's flags (--secure-port, --authentication-kubeconfig, …) cannot clash
// with controller-runtime's --kubeconfig or with the operator's own flags.
const FlagPrefix = "apiserver-"

// Defaults.
const (
	// DefaultSecurePort is the serving port. Not 443 (needs privileges), not
	// 8443 (kubebuilder's secure metrics default), not 9443 (webhooks), not
	// 8090 (the HTTP discovery API).
	DefaultSecurePort = 7443
	// DefaultServiceName and DefaultServiceNamespace name the Service of the
	// APIService (artifacts/apiserver); kube-apiserver dials it with TLS server
	// name <name>.<namespace>.svc, which the self-signed certificate covers.
	DefaultServiceName      = "proxy-lease-api"
	DefaultServiceNamespace = "proxy-operator-system"
	// DefaultMaxWait caps spec.waitSeconds; it stays well under the 60 s that
	// kube-apiserver and this server allow a request.
	DefaultMaxWait = 30 * time.Second
	// DefaultWatchHistory is how many lease events the watch cache keeps for
	// watches that resume from a resourceVersion.
	DefaultWatchHistory = 4096
)

// Options configure the aggregated API server. Build them with NewOptions,
// register the flags with AddFlags (or take FlagSet), then Validate.
type Options struct {
	// SecureServing: --apiserver-secure-port, --apiserver-bind-address,
	// --apiserver-tls-cert-file, --apiserver-tls-private-key-file,
	// --apiserver-cert-dir, … Without a certificate a self-signed one for the
	// Service's DNS names and localhost is generated in memory.
	SecureServing *genericoptions.SecureServingOptionsWithLoopback
	// Authentication is delegated to kube-apiserver (TokenReview and the
	// requestheader settings of kube-system/extension-apiserver-authentication):
	// --apiserver-authentication-kubeconfig, --apiserver-requestheader-*, …
	Authentication *genericoptions.DelegatingAuthenticationOptions
	// Authorization is delegated to kube-apiserver (SubjectAccessReview):
	// --apiserver-authorization-kubeconfig, …
	Authorization *genericoptions.DelegatingAuthorizationOptions

	// ServiceName and ServiceNamespace name the Service of the APIService;
	// they only shape the self-signed certificate.
	ServiceName      string
	ServiceNamespace string
	// MaxWait caps spec.waitSeconds (when a Waiter is configured).
	MaxWait time.Duration
	// WatchHistory is the number of events kept for resuming watches.
	WatchHistory int
	// TrustFrontProxyAuthorization lets a ProxyLease request that
	// kube-apiserver proxied (front-proxy client certificate) through on
	// kube-apiserver's own authorization of it, without a second
	// SubjectAccessReview; requests sent to this server directly are always
	// reviewed. See frontproxy.go.
	TrustFrontProxyAuthorization bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{
		SecureServing:    genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication:   genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:    genericoptions.NewDelegatingAuthorizationOptions(),
		ServiceName:      DefaultServiceName,
		ServiceNamespace: DefaultServiceNamespace,
		MaxWait:          DefaultMaxWait,
		WatchHistory:     DefaultWatchHistory,

		TrustFrontProxyAuthorization: true,
	}
	o.SecureServing.BindPort = DefaultSecurePort
	// kube-apiserver then proxies over a pool of HTTP/1.1 connections: a
	// lease request costs this server about a fifth less than over HTTP/2,
	// whose per-stream goroutines, frame scheduling and header compression
	// outweigh one connection per concurrent request (docs/benchmarks.md);
	// and HTTP/2's rapid-reset class of attacks does not apply, the reason
	// controller-runtime turns it off for its webhook and metrics servers.
	o.SecureServing.DisableHTTP2Serving = true
	// Empty: a generated certificate stays in memory instead of being written
	// to ./apiserver.local.config in whatever directory the operator runs.
	o.SecureServing.ServerCert.CertDirectory = ""
	o.SecureServing.ServerCert.PairName = "proxy-lease-api"
	return o
}

// Enabled reports whether the server should run (--apiserver-secure-port=0
// turns it off).
func (o *Options) Enabled() bool {
	return o.SecureServing != nil && (o.SecureServing.BindPort > 0 || o.SecureServing.Listener != nil)
}

// FlagSet returns a new flag set named "apiserver" holding this package's
// flags, each prefixed with FlagPrefix; add it to the program's flags with
// fs.AddFlagSet.
func (o *Options) FlagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("apiserver", pflag.ContinueOnError)
	o.AddFlags(fs)
	return fs
}

// AddFlags registers the flags on fs, each prefixed with FlagPrefix and
// without shorthands.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	generic := pflag.NewFlagSet("generic", pflag.ContinueOnError)
	o.SecureServing.AddFlags(generic)
	o.Authentication.AddFlags(generic)
	o.Authorization.AddFlags(generic)
	// The generic usages name each other unprefixed (--cert-dir,
	// --secure-port), flags the operator does not have: prefix the names.
	renamed := map[string]bool{}
	generic.VisitAll(func(f *pflag.Flag) { renamed[f.Name] = true })
	generic.VisitAll(func(f *pflag.Flag) {
		f.Name = FlagPrefix + f.Name
		f.Shorthand = ""
		f.Usage = "Aggregated ProxyLease API server: " + prefixFlagNames(f.Usage, renamed)
		fs.AddFlag(f)
	})
	// The generic text says a generated certificate is saved to the cert
	// directory; NewOptions leaves that empty, so by default it stays in memory.
	if f := fs.Lookup(FlagPrefix + "tls-cert-file"); f != nil {
		f.Usage = "Aggregated ProxyLease API server: File containing the x509 serving certificate (CA certificate, if any, concatenated after it), " +
			"with its key in --" + FlagPrefix + "tls-private-key-file. With neither set, the pair " + o.SecureServing.ServerCert.PairName +
			".crt/.key is read from --" + FlagPrefix + "cert-dir (generated there, self-signed, if missing); with no --" + FlagPrefix +
			"cert-dir either, a self-signed certificate for the Service's DNS names and localhost is generated and kept in memory."
	}
	fs.StringVar(&o.ServiceName, FlagPrefix+"service-name", o.ServiceName,
		"Aggregated ProxyLease API server: name of the Service the APIService points at (used for the self-signed serving certificate).")
	fs.StringVar(&o.ServiceNamespace, FlagPrefix+"service-namespace", o.ServiceNamespace,
		"Aggregated ProxyLease API server: namespace of that Service.")
	fs.DurationVar(&o.MaxWait, FlagPrefix+"max-wait", o.MaxWait,
		"Aggregated ProxyLease API server: the longest spec.waitSeconds a ProxyLease may ask for.")
	fs.IntVar(&o.WatchHistory, FlagPrefix+"watch-history", o.WatchHistory,
		"Aggregated ProxyLease API server: lease events kept so that watches can resume from a resourceVersion.")
	fs.BoolVar(&o.TrustFrontProxyAuthorization, FlagPrefix+"trust-front-proxy-authorization", o.TrustFrontProxyAuthorization,
		"Aggregated ProxyLease API server: let ProxyLease requests proxied by kube-apiserver (front-proxy client certificate) through on kube-apiserver's "+
			"authorization of that same request instead of asking it again with a SubjectAccessReview. Requests sent to this server directly are always reviewed.")
}

// prefixFlagNames rewrites every --name in usage whose name is in names to
// --<FlagPrefix>name. It runs once per flag at start-up, so the expression is
// compiled here rather than kept in a package variable.
func prefixFlagNames(usage string, names map[string]bool) string {
	flagRef := regexp.MustCompile(`--[a-z0-9][a-z0-9-]*[a-z0-9]`)
	return flagRef.ReplaceAllStringFunc(usage, func(ref string) string {
		if name := strings.TrimPrefix(ref, "--"); names[name] {
			return "--" + FlagPrefix + name
		}
		return ref
	})
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	if o.ServiceName == "" || o.ServiceNamespace == "" {
		errs = append(errs, fmt.Errorf("--%sservice-name and --%sservice-namespace must not be empty", FlagPrefix, FlagPrefix))
	}
	if o.MaxWait < 0 || o.MaxWait > 55*time.Second {
		errs = append(errs, fmt.Errorf("--%smax-wait %s must be between 0 and 55s (requests time out after 60s)", FlagPrefix, o.MaxWait))
	}
	if o.WatchHistory < 1 {
		errs = append(errs, fmt.Errorf("--%swatch-history %d must be at least 1", FlagPrefix, o.WatchHistory))
	}
	return errors.Join(errs...)
}

// serviceDNSNames are the names kube-apiserver may use for this server.
func (o *Options) serviceDNSNames() []string {
	svc, ns := o.ServiceName, o.ServiceNamespace
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local", "localhost"}
}

func (o *Options) selfSignedCert() error {
	dns := o.serviceDNSNames()
	ips := []string{"127.0.0.1", "::1"}
	parsed := make([]net.IP, 0, len(ips))
	for _, ip := range ips {
		parsed = append(parsed, netutils.ParseIPSloppy(ip))
	}
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts(dns[2], dns, parsed); err != nil {
		return fmt.Errorf("generating a self-signed serving certificate for %s: %w", strings.Join(dns, ", "), err)
	}
	return nil
}
