package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
)

// Defaults.
const (
	DefaultLeaseTTL            = 60 * time.Second
	DefaultSessionIdle         = 2 * time.Minute
	DefaultMaxInFlight         = 20000
	DefaultMaxSessionsPerToken = 1000
	// DefaultMaxInFlightPerSession bounds one sticky session's requests and
	// tunnels at once (all through one proxy).
	DefaultMaxInFlightPerSession = 256
	// DefaultIdleTimeout closes a client's keep-alive connection idle this
	// long between requests (tunnels are not idle connections).
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxUnauthenticatedPerSource bounds one source address's
	// connections on which nothing has leased yet.
	DefaultMaxUnauthenticatedPerSource = 256
	DefaultAPITimeout                  = 10 * time.Second
	DefaultDialTimeout                 = 10 * time.Second
)

// DefaultReportStatuses are the origin statuses reported rate_limited for
// (proxy, host) over plain HTTP.
func DefaultReportStatuses() []int { return []int{429, 403, 503} }

// Options are the gateway's flags.
type Options struct {
	// Addr is where the gateway listens ("" or "0": no gateway).
	Addr string
	// LeaseAPIURL is the HTTP lease API the gateway leases through (the
	// Service in front of the replicas).
	LeaseAPIURL string
	// LeaseAPICAFile verifies LeaseAPIURL (empty: the operator's own CA).
	LeaseAPICAFile string
	// LeaseInProcess: while this replica serves leases, its lease API is
	// called in this process rather than through LeaseAPIURL (which would
	// route back here). Off when LeaseAPIURL is another installation's.
	LeaseInProcess bool
	// LeaseTTL is each lease's TTL, renewed while a request or session
	// holds it.
	LeaseTTL time.Duration
	// SessionIdle ends a sticky session unused this long.
	SessionIdle time.Duration
	// ReportStatuses are reported rate_limited (plain HTTP).
	ReportStatuses []int
	// MaxInFlight bounds the requests and tunnels served at once.
	MaxInFlight int
	// MaxSessionsPerToken bounds each token's sessions.
	MaxSessionsPerToken int
	// MaxInFlightPerToken bounds one token's requests and tunnels at once
	// (0: a quarter of MaxInFlight), so that no token holds the gateway;
	// MaxInFlightPerSession one sticky session's.
	MaxInFlightPerToken   int
	MaxInFlightPerSession int
	// IdleTimeout closes a client connection idle this long between
	// requests, answered or refused.
	IdleTimeout time.Duration
	// MaxUnauthenticatedPerSource bounds the connections of one source
	// address on which no request has leased yet; past it, new ones are
	// closed as they are accepted.
	MaxUnauthenticatedPerSource int
	// APITimeout bounds a call to the lease API that does not wait (release,
	// report, renew); DialTimeout the dial and CONNECT to a proxy.
	APITimeout  time.Duration
	DialTimeout time.Duration
}

// DefaultOptions returns the defaults (the gateway off).
func DefaultOptions() Options {
	return Options{LeaseInProcess: true, LeaseTTL: DefaultLeaseTTL, SessionIdle: DefaultSessionIdle, ReportStatuses: DefaultReportStatuses(),
		MaxInFlight: DefaultMaxInFlight, MaxSessionsPerToken: DefaultMaxSessionsPerToken, MaxInFlightPerSession: DefaultMaxInFlightPerSession,
		IdleTimeout: DefaultIdleTimeout, MaxUnauthenticatedPerSource: DefaultMaxUnauthenticatedPerSource, APITimeout: DefaultAPITimeout, DialTimeout: DefaultDialTimeout}
}

// Enabled reports whether the gateway is served.
func (o *Options) Enabled() bool { return o.Addr != "" && o.Addr != "0" }

// AddFlags registers the --gateway-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "gateway-bind-address", o.Addr, "Address of the forward-proxy gateway (docs/gateway.md); empty or \"0\": none.")
	fs.StringVar(&o.LeaseAPIURL, "gateway-lease-api-url", o.LeaseAPIURL, "The HTTP lease API the gateway leases through with each client's token: the discovery API's Service, which routes to the replica that leads.")
	fs.StringVar(&o.LeaseAPICAFile, "gateway-lease-api-ca-file", o.LeaseAPICAFile, "PEM CA bundle verifying --gateway-lease-api-url. Unset: the operator's own CA.")
	fs.BoolVar(&o.LeaseInProcess, "gateway-lease-in-process", o.LeaseInProcess, "While this replica serves leases, call its lease API in this process (the same token check and answers, without TLS, the network or JSON) instead of through --gateway-lease-api-url. Set false when that URL is another installation's API.")
	fs.DurationVar(&o.LeaseTTL, "gateway-lease-ttl", o.LeaseTTL, "TTL of the gateway's leases, renewed while a request, tunnel or session holds one.")
	fs.DurationVar(&o.SessionIdle, "gateway-session-idle", o.SessionIdle, "A sticky session unused this long ends and its lease is released.")
	fs.IntSliceVar(&o.ReportStatuses, "gateway-report-statuses", o.ReportStatuses, "Origin status codes of plain HTTP responses reported rate_limited for the proxy and host.")
	fs.IntVar(&o.MaxInFlight, "gateway-max-in-flight", o.MaxInFlight, "Most requests and tunnels the gateway serves at once; past it, 429.")
	fs.IntVar(&o.MaxSessionsPerToken, "gateway-max-sessions-per-token", o.MaxSessionsPerToken, "Most sticky sessions one token may hold; past it, 429.")
	fs.IntVar(&o.MaxInFlightPerToken, "gateway-max-in-flight-per-token", o.MaxInFlightPerToken, "Most requests and tunnels one token may have at once; past it, 429. 0: a quarter of --gateway-max-in-flight.")
	fs.IntVar(&o.MaxInFlightPerSession, "gateway-max-in-flight-per-session", o.MaxInFlightPerSession, "Most requests and tunnels one sticky session may have at once; past it, 429.")
	fs.DurationVar(&o.IdleTimeout, "gateway-idle-timeout", o.IdleTimeout, "A client connection idle this long between requests is closed.")
	fs.IntVar(&o.MaxUnauthenticatedPerSource, "gateway-max-unauthenticated-per-source", o.MaxUnauthenticatedPerSource, "Most connections one source address may hold on which nothing has leased yet; past it, new ones are closed at once.")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if _, port, err := net.SplitHostPort(o.Addr); err != nil {
		errs = append(errs, fmt.Errorf("--gateway-bind-address %q: %w", o.Addr, err))
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		errs = append(errs, fmt.Errorf("--gateway-bind-address %q: the port must be 0-65535", o.Addr))
	}
	if u, err := url.Parse(o.LeaseAPIURL); o.LeaseAPIURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--gateway-lease-api-url %q: want the lease API's https:// URL (the gateway leases through it)", o.LeaseAPIURL))
	}
	if o.LeaseTTL < 10*time.Second {
		errs = append(errs, fmt.Errorf("--gateway-lease-ttl %s: at least 10s", o.LeaseTTL))
	}
	if o.SessionIdle <= 0 {
		errs = append(errs, fmt.Errorf("--gateway-session-idle %s: must be positive", o.SessionIdle))
	}
	for _, s := range o.ReportStatuses {
		if s < 100 || s > 599 {
			errs = append(errs, fmt.Errorf("--gateway-report-statuses: %d is not an HTTP status", s))
		}
	}
	if o.MaxInFlight < 1 || o.MaxSessionsPerToken < 1 || o.MaxInFlightPerSession < 1 {
		errs = append(errs, errors.New("--gateway-max-in-flight, --gateway-max-sessions-per-token and --gateway-max-in-flight-per-session: at least 1"))
	}
	if o.MaxUnauthenticatedPerSource < 1 {
		errs = append(errs, errors.New("--gateway-max-unauthenticated-per-source: at least 1"))
	}
	if o.MaxInFlightPerToken < 0 {
		errs = append(errs, errors.New("--gateway-max-in-flight-per-token: at least 1, or 0 for a quarter of --gateway-max-in-flight"))
	}
	if o.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--gateway-idle-timeout %s: must be positive", o.IdleTimeout))
	}
	return errors.Join(errs...)
}

// inFlightPerToken is MaxInFlightPerToken, or its default.
func (o *Options) inFlightPerToken() int {
	if o.MaxInFlightPerToken > 0 {
		return o.MaxInFlightPerToken
	}
	return max(1, o.MaxInFlight/4)
}

// Leaser is the APILeaser of o: LeaseAPIURL verified with LeaseAPICAFile
// or, unset, defaultCA (the operator's own CA; nil: the system's roots).
// With local (nil: none) and LeaseInProcess, its calls go to local's
// Leaser in this process while this replica serves leases, and to
// LeaseAPIURL otherwise.
func (o *Options) Leaser(defaultCA []byte, local *LocalAPI) (Leaser, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case o.LeaseAPICAFile != "":
		roots, err := client.LoadCAFile(o.LeaseAPICAFile)
		if err != nil {
			return nil, fmt.Errorf("--gateway-lease-api-ca-file: %w", err)
		}
		tlsConfig.RootCAs = roots
	case defaultCA != nil:
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(defaultCA) {
			return nil, errors.New("gateway: the operator's CA bundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = roots
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tlsConfig
	t.MaxIdleConnsPerHost = 64
	remote := &APILeaser{BaseURL: o.LeaseAPIURL, HTTPClient: &http.Client{Transport: t}}
	if local != nil && o.LeaseInProcess {
		return &localLeaser{local: *local, remote: remote}, nil
	}
	return remote, nil
}

// NewGateway is the gateway of o as the operator runs it: leasing through
// o.Leaser(defaultCA, local), counting on rec, dialling no leased proxy that
// denied (the probes' dial policy) refuses.
func (o *Options) NewGateway(defaultCA []byte, local *LocalAPI, rec Recorder, denied dialpolicy.Denylist) (*Gateway, error) {
	leaser, err := o.Leaser(defaultCA, local)
	if err != nil {
		return nil, err
	}
	return New(*o, Deps{Leaser: leaser, Recorder: rec, Denied: denied})
}
