package certs

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults.
const (
	DefaultCAValidity     = 3 * 365 * 24 * time.Hour
	DefaultCertValidity   = 90 * 24 * time.Hour
	DefaultResyncInterval = time.Minute
	DefaultCAConfigMap    = "proxy-operator-ca"
)

// Options are the --serving-cert-* flags.
type Options struct {
	// SecretName is the Secret holding the CA and the serving certificate;
	// empty turns the manager off (each server then uses its own files).
	SecretName string
	// Namespace of the Secret and the CA ConfigMap: the operator's own,
	// set by the composition root (--namespace).
	Namespace string
	// Services are the names of the Services in Namespace the certificate
	// serves (each as svc, svc.ns, svc.ns.svc and svc.ns.svc.cluster.local).
	Services []string
	// Hosts are more DNS names or IP addresses it serves (an Ingress host,
	// localhost).
	Hosts []string
	// APIService gets the CA bundle in spec.caBundle ("": none).
	APIService string
	// CAConfigMap gets the CA bundle under ca.crt, for in-cluster clients of
	// the HTTP discovery API ("": none).
	CAConfigMap string
	// CAValidity and CertValidity are the lifetimes of what is issued; each
	// is renewed two thirds into its life.
	CAValidity   time.Duration
	CertValidity time.Duration
	// ResyncInterval is how often the Secret is read again (another replica
	// may have renewed it) and the bundle re-published.
	ResyncInterval time.Duration
}

// DefaultOptions returns the defaults (manager off).
func DefaultOptions() Options {
	return Options{
		Services:       []string{"proxy-lease-api", "proxy-operator-discovery"},
		APIService:     "v1alpha1.leasing.crawl.example.com",
		CAConfigMap:    DefaultCAConfigMap,
		CAValidity:     DefaultCAValidity,
		CertValidity:   DefaultCertValidity,
		ResyncInterval: DefaultResyncInterval,
	}
}

// Enabled reports whether the operator manages its certificates.
func (o *Options) Enabled() bool { return o.SecretName != "" }

// AddFlags registers the --serving-cert-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretName, "serving-cert-secret", o.SecretName, "Secret in which the operator keeps a CA and a serving certificate it issues and renews itself, used by the aggregated API and the HTTP discovery API when their --*-tls-cert-file is unset; empty: off.")
	fs.StringSliceVar(&o.Services, "serving-cert-services", o.Services, "Services (in the operator's namespace) whose DNS names the serving certificate holds.")
	fs.StringSliceVar(&o.Hosts, "serving-cert-hosts", o.Hosts, "More DNS names or IP addresses the serving certificate holds (e.g. an external host name of the HTTP discovery API).")
	fs.StringVar(&o.APIService, "serving-cert-apiservice", o.APIService, "APIService whose spec.caBundle the operator keeps set to its CA bundle (\"\": none).")
	fs.StringVar(&o.CAConfigMap, "serving-cert-ca-configmap", o.CAConfigMap, "ConfigMap (in the operator's namespace) the operator writes its CA bundle to, key ca.crt (\"\": none).")
	fs.DurationVar(&o.CAValidity, "serving-cert-ca-validity", o.CAValidity, "Lifetime of the CA the operator issues (renewed two thirds into it; the old CA stays trusted until it expires).")
	fs.DurationVar(&o.CertValidity, "serving-cert-validity", o.CertValidity, "Lifetime of the serving certificate (renewed two thirds into it).")
	fs.DurationVar(&o.ResyncInterval, "serving-cert-resync-interval", o.ResyncInterval, "How often the certificate Secret is read again and the CA bundle re-published.")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(o.SecretName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--serving-cert-secret %q: %s", o.SecretName, strings.Join(msgs, "; ")))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--serving-cert-secret: the operator's namespace is unknown (give --namespace out of a cluster)"))
	} else if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: %s", o.Namespace, strings.Join(msgs, "; ")))
	}
	if len(o.Services) == 0 && len(o.Hosts) == 0 {
		errs = append(errs, errors.New("--serving-cert-services and --serving-cert-hosts: the certificate needs at least one name"))
	}
	for _, s := range o.Services {
		if msgs := validation.IsDNS1035Label(s); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--serving-cert-services %q: %s", s, strings.Join(msgs, "; ")))
		}
	}
	for _, h := range o.Hosts {
		if net.ParseIP(h) != nil {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(h); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--serving-cert-hosts %q: neither an IP address nor a DNS name: %s", h, strings.Join(msgs, "; ")))
		}
	}
	if o.CAConfigMap != "" {
		if msgs := validation.IsDNS1123Subdomain(o.CAConfigMap); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--serving-cert-ca-configmap %q: %s", o.CAConfigMap, strings.Join(msgs, "; ")))
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--serving-cert-ca-validity", o.CAValidity},
		{"--serving-cert-validity", o.CertValidity},
		{"--serving-cert-resync-interval", o.ResyncInterval},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", d.flag, d.v))
		}
	}
	if o.CertValidity > o.CAValidity {
		errs = append(errs, fmt.Errorf("--serving-cert-validity %s: must not exceed --serving-cert-ca-validity %s", o.CertValidity, o.CAValidity))
	}
	return errors.Join(errs...)
}

// hosts are the names the serving certificate holds.
func (o *Options) hosts(ns string) []string {
	var out []string
	for _, s := range o.Services {
		out = append(out, s+"."+ns+".svc", s, s+"."+ns, s+"."+ns+".svc.cluster.local")
	}
	return append(out, o.Hosts...)
}
