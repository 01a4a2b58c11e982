package discovery

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"

	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// ServingOptions are the flags of the HTTP discovery API: where it listens,
// whose tokens it accepts and how long a request may wait.
type ServingOptions struct {
	// Addr serves the HTTP discovery API ("0" disables it).
	Addr string
	// TokenFile holds the accepted bearer tokens, one "token,identity" line
	// each, or a single bare token (identity DefaultIdentity); see
	// ParseTokens. Empty: one token from $PROXY_OPERATOR_DISCOVERY_TOKEN;
	// with neither, authentication is off and the server says so loudly.
	TokenFile string
	// MaxWait caps waitSeconds of POST /v1/leases.
	MaxWait time.Duration
	// TLSCertFile and TLSKeyFile are the serving pair, read again whenever
	// the files change (a renewed certificate needs no restart).
	TLSCertFile string
	TLSKeyFile  string
	// TokenSecret names a Secret of the operator's namespace holding the
	// tokens (key "token", the token file's format), created with one
	// generated token when missing and re-read while running; used when
	// TokenFile is unset.
	TokenSecret string
	// KubernetesTokens also accepts a pod's ServiceAccount token, reviewed
	// with kube-apiserver (KubernetesTokens), for leases in its namespace.
	KubernetesTokens bool
	// PlainHTTP serves without TLS. Only when asked for: bearer tokens then
	// cross the network in clear.
	PlainHTTP bool
}

// DefaultServingOptions returns the defaults.
func DefaultServingOptions() ServingOptions {
	return ServingOptions{Addr: DefaultAddr, MaxWait: DefaultMaxWait, KubernetesTokens: true}
}

// Enabled reports whether the API is served (--discovery-bind-address other
// than "0").
func (o *ServingOptions) Enabled() bool { return o.Addr != "0" }

// AddFlags registers the --discovery-* flags.
func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "discovery-bind-address", o.Addr, "Address of the HTTP discovery (lease) API; \"0\" disables it.")
	fs.StringVar(&o.TokenFile, "discovery-token-file", o.TokenFile, "File of the discovery API's bearer tokens: one token,identity line each (# comments), or a single bare token (identity \""+DefaultIdentity+"\"). Unset: one token from $"+TokenEnv+"; with neither, authentication is OFF (logged as a warning).")
	fs.StringVar(&o.TokenSecret, "discovery-token-secret", o.TokenSecret, "Secret (in the operator's namespace) of the discovery API's bearer tokens, key \"token\" in --discovery-token-file's format; created with one generated token (identity \""+DefaultIdentity+"\") if missing, re-read every "+DefaultTokenSecretInterval.String()+". Not with --discovery-token-file.")
	fs.DurationVar(&o.MaxWait, "discovery-max-wait", o.MaxWait, "Longest waitSeconds a POST /v1/leases may ask for.")
	fs.StringVar(&o.TLSCertFile, "discovery-tls-cert-file", o.TLSCertFile, "PEM certificate (chain) the HTTP discovery API serves, re-read when the file changes. Unset: the operator's own certificate (--serving-cert-secret).")
	fs.StringVar(&o.TLSKeyFile, "discovery-tls-private-key-file", o.TLSKeyFile, "PEM private key of --discovery-tls-cert-file.")
	fs.BoolVar(&o.KubernetesTokens, "discovery-kubernetes-tokens", o.KubernetesTokens, "Also accept a pod's ServiceAccount token (a TokenReview, then a SubjectAccessReview for create proxyleases in its namespace, cached "+DefaultKubernetesTokenTTL.String()+"), for leases in that namespace; needs RBAC create on tokenreviews and subjectaccessreviews (system:auth-delegator).")
	fs.BoolVar(&o.PlainHTTP, "discovery-plain-http", o.PlainHTTP, "Serve the HTTP discovery API without TLS (bearer tokens cross the network in clear; logged as a warning). Only for a listener no one else can reach.")
}

// Validate reports every invalid option.
func (o *ServingOptions) Validate() error {
	var errs []error
	if o.Enabled() {
		if err := validateBindAddress(o.Addr); err != nil {
			errs = append(errs, fmt.Errorf("--discovery-bind-address: %w", err))
		}
	}
	switch {
	case (o.TLSCertFile == "") != (o.TLSKeyFile == ""):
		errs = append(errs, errors.New("--discovery-tls-cert-file and --discovery-tls-private-key-file: give both or neither"))
	case o.PlainHTTP && o.TLSCertFile != "":
		errs = append(errs, errors.New("--discovery-plain-http: conflicts with --discovery-tls-cert-file (serve TLS or plain HTTP, not both)"))
	}
	if o.TokenFile != "" && o.TokenSecret != "" {
		errs = append(errs, errors.New("--discovery-token-file and --discovery-token-secret: give one (both name the tokens)"))
	}
	if o.TokenSecret != "" {
		if msgs := validation.IsDNS1123Subdomain(o.TokenSecret); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--discovery-token-secret %q: %s", o.TokenSecret, strings.Join(msgs, "; ")))
		}
	}
	if o.MaxWait <= 0 {
		errs = append(errs, fmt.Errorf("--discovery-max-wait: must be positive, got %s", o.MaxWait))
	}
	return errors.Join(errs...)
}

// validateBindAddress accepts host:port with an optional host and a port in
// 0..65535 (0: any free port).
func validateBindAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port must be a number in 0..65535", addr)
	}
	return nil
}

// ErrNoServingCert is returned by ServingCert when the API would have to
// serve plain HTTP without being asked to.
var ErrNoServingCert = errors.New("the HTTP discovery API serves TLS: give --discovery-tls-cert-file and --discovery-tls-private-key-file, or --serving-cert-secret for the operator's own certificate; --discovery-plain-http serves plain HTTP instead (bearer tokens in clear)")

// certSource is where the API's certificate comes from.
type certSource int

const (
	certFiles certSource = iota
	certPlainHTTP
	certManaged
	certNone
)

// certSource is the one rule of the choice: its files when given, else
// plain HTTP when asked for, else the operator's own when it has one.
func (o *ServingOptions) certSource(managed bool) certSource {
	switch {
	case o.TLSCertFile != "":
		return certFiles
	case o.PlainHTTP:
		return certPlainHTTP
	case managed:
		return certManaged
	}
	return certNone
}

// ValidateTLS reports whether the API has a certificate to serve, or was
// asked for plain HTTP, given whether the operator manages its own
// certificate.
func (o *ServingOptions) ValidateTLS(managedCert bool) error {
	if o.Enabled() && o.certSource(managedCert) == certNone {
		return ErrNoServingCert
	}
	return nil
}

// ServingCert is the certificate the API serves (see certSource): a
// controller re-reading its files (Server.Serve runs it), nil for plain
// HTTP, managed (the operator's own), or ErrNoServingCert.
func (o *ServingOptions) ServingCert(managed dynamiccertificates.CertKeyContentProvider) (dynamiccertificates.CertKeyContentProvider, error) {
	switch o.certSource(managed != nil) {
	case certFiles:
		c, err := dynamiccertificates.NewDynamicServingContentFromFiles("discovery-serving-cert", o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--discovery-tls-cert-file: %w", err)
		}
		return c, nil
	case certPlainHTTP:
		return nil, nil
	case certManaged:
		return managed, nil
	}
	return nil, ErrNoServingCert
}

// Authenticator is the TokenAuthenticator of --discovery-kubernetes-tokens
// over kube (nil when off).
func (o *ServingOptions) Authenticator(kube kubernetes.Interface) TokenAuthenticator {
	if !o.KubernetesTokens || kube == nil {
		return nil
	}
	return &KubernetesTokens{Reviews: kube.AuthenticationV1().TokenReviews(), Access: kube.AuthorizationV1().SubjectAccessReviews()}
}

// NewServer builds the API as the operator serves it: every token of tokens
// authenticates as its identity, which becomes the holder and default flow
// of its leases; with kube, pods' ServiceAccount tokens too
// (--discovery-kubernetes-tokens). It serves TLS with its own certificate
// files, else managed (nil: none), else plain HTTP when asked for.
func (o *ServingOptions) NewServer(tokens Tokens, svc *leasing.Service, managed dynamiccertificates.CertKeyContentProvider, kube kubernetes.Interface) (*Server, error) {
	cert, err := o.ServingCert(managed)
	if err != nil {
		return nil, err
	}
	opts := Options{Addr: o.Addr, Tokens: tokens, Service: svc, Cert: cert}
	if a := o.Authenticator(kube); a != nil {
		opts.Kubernetes = a
	}
	srv, err := New(opts)
	if err != nil {
		return nil, fmt.Errorf("creating discovery server: %w", err)
	}
	return srv, nil
}
