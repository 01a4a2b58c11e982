package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
)

// Target is one probe to send: the health check of one Proxy, through its
// proxy URL.
type Target struct {
	// Key is the Proxy the probe is about (for logs and wrappers).
	Key types.NamespacedName
	// ProxyURL is the proxy to go through, "http://host:port".
	ProxyURL string
	// HealthCheck is the Proxy's spec.healthCheck with defaults applied.
	HealthCheck crawlv1alpha1.HealthCheck
	// ProxyUser, when set, are the credentials the proxy asks of a probe
	// (a Managed proxy checks them; see ProbeAuth).
	ProxyUser *url.Userinfo
}

// Prober sends one health probe.
type Prober interface {
	// Probe fetches t.HealthCheck.URL through t.ProxyURL and returns the
	// measured latency and nil when the target answered
	// t.HealthCheck.ExpectedStatus within t.HealthCheck.TimeoutSeconds. A
	// failed probe returns an error wrapping one of ErrInvalidTarget,
	// ErrTimeout, ErrUnexpectedStatus or ErrTransport (the latency is then
	// the time spent, possibly zero) whose message quotes nothing the proxy
	// or the target sent (it reaches the Proxy's status and Events; see
	// ProbeError). It must honour ctx, never panic, and be safe for
	// concurrent use.
	Probe(ctx context.Context, t Target) (time.Duration, error)
}

// maxBodyBytes bounds how much of a probe response is read: the body only
// matters to let the proxy finish the exchange cleanly.
const maxBodyBytes = 64 << 10

// userAgent identifies probes in proxy and origin logs.
const userAgent = "proxy-operator-healthcheck/1"

// HTTPProber is the real Prober. A fresh http.Transport per probe with
// keep-alives disabled is load-bearing: a pooled connection would cache the
// proxy connection — for https, the CONNECT tunnel itself — and every later
// probe would reuse it instead of exercising the proxy's accept, forward and
// CONNECT paths again, so a proxy that stopped accepting would stay healthy
// while its old tunnel lived.
type HTTPProber struct {
	clock  clock.PassiveClock
	denied dialpolicy.Denylist
}

var _ Prober = (*HTTPProber)(nil)

// NewHTTPProber returns the real prober, which reaches nothing denied; a
// nil clock means the real clock (it only measures latency).
func NewHTTPProber(c clock.PassiveClock, denied dialpolicy.Denylist) *HTTPProber {
	if c == nil {
		c = clock.RealClock{}
	}
	return &HTTPProber{clock: c, denied: denied}
}

// Probe implements Prober.
func (p *HTTPProber) Probe(ctx context.Context, t Target) (time.Duration, error) {
	hc := t.HealthCheck.WithDefaults()
	proxyURL, err := url.Parse(t.ProxyURL)
	if err != nil || proxyURL.Host == "" {
		return 0, fmt.Errorf("%w: proxy URL %q", ErrInvalidTarget, t.ProxyURL)
	}
	target, err := url.Parse(hc.URL)
	if err != nil || target.Host == "" || (target.Scheme != "http" && target.Scheme != "https") {
		return 0, fmt.Errorf("%w: health check URL %q must be an absolute http or https URL", ErrInvalidTarget, hc.URL)
	}
	proxyURL.User = t.ProxyUser
	tlsConfig, err := clientTLSConfig(hc.TLS)
	if err != nil {
		return 0, err
	}
	timeout := time.Duration(hc.TimeoutSeconds) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := checkURLHost(ctx, p.denied, target); err != nil {
		return 0, err
	}

	tr := &http.Transport{
		// With Proxy set, Go's transport sends plain http as an
		// absolute-form GET to the proxy and tunnels https through CONNECT,
		// then does TLS with the target inside the tunnel.
		Proxy:             http.ProxyURL(proxyURL),
		DialContext:       (&net.Dialer{Timeout: timeout, KeepAlive: -1, Control: p.denied.Control}).DialContext,
		TLSClientConfig:   tlsConfig,
		DisableKeepAlives: true,
		// Compression would only hide what the proxy returned.
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxBodyBytes,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport: tr,
		// A redirect is an answer of the target; expectedStatus decides.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidTarget, err)
	}
	req.Header.Set("User-Agent", userAgent)

	start := p.clock.Now()
	resp, err := client.Do(req)
	latency := p.clock.Since(start)
	if err != nil {
		if denied := deniedProxy(err); denied != nil {
			return latency, denied
		}
		if ctx.Err() != nil || isNetTimeout(err) {
			return latency, &ProbeError{Class: ErrTimeout, Summary: "no answer within " + timeout.String(), Cause: err}
		}
		return latency, &ProbeError{Class: ErrTransport, Summary: transportSummary(err), Cause: err}
	}
	// Drain a little so the proxy sees a complete exchange, then close: the
	// transport is discarded anyway.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyBytes))
	_ = resp.Body.Close()
	if resp.StatusCode != int(hc.ExpectedStatus) {
		return latency, &StatusError{Got: resp.StatusCode, Want: int(hc.ExpectedStatus)}
	}
	return latency, nil
}

// clientTLSConfig builds the TLS settings of an https probe; nil settings
// mean Go's defaults (system roots, server name from the URL).
func clientTLSConfig(s *crawlv1alpha1.HealthCheckTLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s == nil {
		return cfg, nil
	}
	cfg.ServerName = s.ServerName
	cfg.InsecureSkipVerify = s.InsecureSkipVerify //nolint:gosec // explicit user choice in the Proxy spec
	if s.CABundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(s.CABundle)) {
			return nil, fmt.Errorf("%w: spec.healthCheck.tls.caBundle holds no usable PEM certificate", ErrInvalidTarget)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
