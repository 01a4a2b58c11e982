package proxyauth

import (
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/spf13/pflag"
)

// DefaultSecretName is the Secret of the installation key.
const DefaultSecretName = "proxy-operator-proxy-auth"

// Options are the --proxy-auth-* flags.
type Options struct {
	// SecretName names the Secret (in the operator's namespace) holding the
	// installation key, created on first start; "" turns proxy auth off.
	SecretName string
	// Namespace is the operator's own, set by the composition root.
	Namespace string
	// OperatorURL is the discovery API's address as the proxies reach it
	// (where helpers poll their live lists); "" gives helpers none.
	OperatorURL string
	// CAFile verifies OperatorURL's certificate for the helpers ("": the
	// operator's own CA when it makes its certificate, else the proxies'
	// system roots).
	CAFile string
	// AllowedCIDRs, DeniedCIDRs and AllowedPorts are the flags' text of the
	// proxies' Egress.
	AllowedCIDRs, DeniedCIDRs, AllowedPorts []string
}

// DefaultOptions returns the defaults: proxy auth on.
func DefaultOptions() Options { return Options{SecretName: DefaultSecretName} }

// Enabled reports whether the operator's proxies check credentials.
func (o *Options) Enabled() bool { return o.SecretName != "" }

// AddFlags registers the --proxy-auth-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretName, "proxy-auth-secret", o.SecretName, "Secret (in the operator's namespace) holding the key proxy credentials derive from, created on first start. Every proxy the operator runs then refuses (407) requests without a live lease's credentials, which each lease answer carries. Replacing the key replaces every proxy. Empty: proxies check nothing (anyone who reaches one may use it).")
	fs.StringVar(&o.OperatorURL, "proxy-auth-operator-url", o.OperatorURL, "The HTTP discovery API's URL as the proxies reach it (e.g. https://proxy-operator-discovery.proxy-operator-system.svc:8443): their auth helpers poll the leases live on them there, so a released lease's credentials stop working within 30 seconds. Empty: they work until the lease's expiry.")
	fs.StringVar(&o.CAFile, "proxy-auth-ca-file", o.CAFile, "PEM CA bundle the proxies verify --proxy-auth-operator-url with (empty: the operator's own CA with --serving-cert-secret, else their system roots).")
	fs.StringSliceVar(&o.AllowedCIDRs, "proxy-allowed-cidrs", o.AllowedCIDRs, "Ranges the proxies may reach for a lease although they are loopback, link-local, private or otherwise internal (comma-separated CIDRs; default none: the proxies reach the public internet only, checked after DNS resolution). For an intranet crawl, or a local origin in tests.")
	fs.StringSliceVar(&o.DeniedCIDRs, "proxy-denied-cidrs", o.DeniedCIDRs, "Ranges the proxies refuse besides the internal ones (comma-separated CIDRs): the cluster's pod and Service ranges where they are not private.")
	fs.StringSliceVar(&o.AllowedPorts, "proxy-allowed-ports", o.AllowedPorts, "Ports the proxies may reach for a lease besides 443 (CONNECT) and 80 and 443 (plain HTTP): comma-separated ports or ranges (8080,8000-8999).")
}

// Egress is the proxies' Egress the flags say.
func (o *Options) Egress() (Egress, error) {
	return ParseEgress(o.AllowedCIDRs, o.DeniedCIDRs, o.AllowedPorts)
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--proxy-auth-secret: the operator's namespace is unknown (give --namespace out of a cluster)"))
	}
	if o.OperatorURL != "" {
		if u, err := url.Parse(o.OperatorURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--proxy-auth-operator-url %q: want an absolute https URL", o.OperatorURL))
		}
	}
	if o.CAFile != "" && o.OperatorURL == "" {
		errs = append(errs, errors.New("--proxy-auth-ca-file: only with --proxy-auth-operator-url"))
	}
	if _, err := o.Egress(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Instances builds the configuration of each instance (controller
// InstanceAuth) from the keyring and these options.
func (o *Options) Instances(k *Keyring) (*Instances, error) {
	e, err := o.Egress()
	if err != nil {
		return nil, err
	}
	in := &Instances{keyring: k, operatorURL: o.OperatorURL, egress: e}
	if o.CAFile != "" {
		b, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--proxy-auth-ca-file: %w", err)
		}
		in.caPEM = string(b)
	}
	return in, nil
}

// Instances gives each instance its helper configuration.
type Instances struct {
	keyring     *Keyring
	operatorURL string
	caPEM       string
	egress      Egress
	// defaultCA is the CA bundle when no CA file was given (nil: none).
	defaultCA func() []byte
}

// DefaultCA sets the CA bundle the helpers verify the operator with when
// --proxy-auth-ca-file is empty: the operator's own. Call it before the
// first InstanceAuth.
func (i *Instances) DefaultCA(bundle func() []byte) { i.defaultCA = bundle }

// InstanceAuth returns the helper configuration of Proxy namespace/name.
func (i *Instances) InstanceAuth(namespace, name string) []byte {
	ca := i.caPEM
	if ca == "" && i.operatorURL != "" && i.defaultCA != nil {
		ca = string(i.defaultCA())
	}
	c := i.keyring.HelperConfig(ProxyRef{Namespace: namespace, Name: name}, i.operatorURL, ca)
	c.Egress = i.egress
	return c.Marshal()
}
