package health_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
	"github.com/proxy-operator/proxy-operator/pkg/health"
	"github.com/proxy-operator/proxy-operator/pkg/health/healthtest"
)

// origin counts requests and answers with status.
type origin struct {
	status atomic.Int32
	hits   atomic.Int32
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.hits.Add(1)
	if r.URL.Path == "/redirect" {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
		return
	}
	w.WriteHeader(int(o.status.Load()))
	_, _ = w.Write([]byte("ok\n"))
}

func newOrigin(t *testing.T, tlsServer bool) (*origin, *httptest.Server) {
	t.Helper()
	o := &origin{}
	o.status.Store(http.StatusOK)
	var srv *httptest.Server
	if tlsServer {
		srv = httptest.NewTLSServer(o)
	} else {
		srv = httptest.NewServer(o)
	}
	t.Cleanup(srv.Close)
	return o, srv
}

func newForwardProxy(t *testing.T) *healthtest.ForwardProxy {
	t.Helper()
	p, err := healthtest.NewForwardProxy("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func caBundle(srv *httptest.Server) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}

func target(proxyURL, url string, tls *crawlv1alpha1.HealthCheckTLS) health.Target {
	return health.Target{
		Key:      types.NamespacedName{Namespace: "ns", Name: "p"},
		ProxyURL: proxyURL,
		HealthCheck: crawlv1alpha1.HealthCheck{
			URL: url, TimeoutSeconds: 2, IntervalSeconds: 10, ExpectedStatus: 200, TLS: tls,
		}.WithDefaults(),
	}
}

func TestProbeHTTPThroughProxy(t *testing.T) {
	o, srv := newOrigin(t, false)
	fp := newForwardProxy(t)
	p := health.NewHTTPProber(nil, dialpolicy.Denylist{})
	for i := range 3 {
		lat, err := p.Probe(context.Background(), target(fp.URL, srv.URL+"/", nil))
		if err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		if lat <= 0 {
			t.Errorf("probe %d: latency %s", i, lat)
		}
	}
	// Through the proxy, as a forwarded GET, one fresh connection per probe.
	got := []int64{fp.Gets(), fp.Connects(), fp.Conns(), int64(o.hits.Load())}
	if d := cmp.Diff([]int64{3, 0, 3, 3}, got); d != "" {
		t.Errorf("[gets connects conns originHits] (-want +got):\n%s", d)
	}
}

func TestProbeHTTPSThroughConnect(t *testing.T) {
	o, srv := newOrigin(t, true)
	fp := newForwardProxy(t)
	p := health.NewHTTPProber(nil, dialpolicy.Denylist{})
	tests := []struct {
		name    string
		url     string
		tls     *crawlv1alpha1.HealthCheckTLS
		wantErr func(error) bool
	}{
		{"CA bundle", srv.URL + "/", &crawlv1alpha1.HealthCheckTLS{CABundle: caBundle(srv)}, nil},
		{"CA bundle and a server name in the certificate", srv.URL + "/",
			&crawlv1alpha1.HealthCheckTLS{CABundle: caBundle(srv), ServerName: "example.com"}, nil},
		{"insecureSkipVerify", srv.URL + "/", &crawlv1alpha1.HealthCheckTLS{InsecureSkipVerify: true}, nil},
		{"server name not in the certificate", srv.URL + "/",
			&crawlv1alpha1.HealthCheckTLS{CABundle: caBundle(srv), ServerName: "wrong.test"}, health.IsTransport},
		{"untrusted certificate (system roots)", srv.URL + "/", nil, health.IsTransport},
		{"CA bundle without certificates", srv.URL + "/",
			&crawlv1alpha1.HealthCheckTLS{CABundle: "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"}, health.IsInvalidTarget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			connects, hits := fp.Connects(), o.hits.Load()
			_, err := p.Probe(context.Background(), target(fp.URL, tt.url, tt.tls))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("probe: %v", err)
				}
				if fp.Connects() != connects+1 || o.hits.Load() != hits+1 {
					t.Errorf("not tunnelled: connects %d→%d, origin hits %d→%d", connects, fp.Connects(), hits, o.hits.Load())
				}
				return
			}
			if !tt.wantErr(err) {
				t.Fatalf("probe error %v is not of the expected class", err)
			}
		})
	}
	// A fresh tunnel per probe: keep-alives would reuse the first one.
	before := fp.Connects()
	for range 3 {
		if _, err := p.Probe(context.Background(), target(fp.URL, srv.URL+"/", &crawlv1alpha1.HealthCheckTLS{CABundle: caBundle(srv)})); err != nil {
			t.Fatal(err)
		}
	}
	if got := fp.Connects() - before; got != 3 {
		t.Errorf("3 probes opened %d CONNECT tunnels, want 3", got)
	}
}

func TestProbeStatus(t *testing.T) {
	o, srv := newOrigin(t, false)
	fp := newForwardProxy(t)
	p := health.NewHTTPProber(nil, dialpolicy.Denylist{})

	o.status.Store(http.StatusServiceUnavailable)
	_, err := p.Probe(context.Background(), target(fp.URL, srv.URL+"/", nil))
	if !health.IsUnexpectedStatus(err) {
		t.Fatalf("503 for 200: error %v, want unexpected status", err)
	}
	if se, ok := err.(*health.StatusError); !ok || se.Got != 503 || se.Want != 200 {
		t.Errorf("error %#v, want StatusError{503, 200}", err)
	}

	// expectedStatus decides, and redirects are answers, not followed.
	o.status.Store(http.StatusNoContent)
	tg := target(fp.URL, srv.URL+"/", nil)
	tg.HealthCheck.ExpectedStatus = http.StatusNoContent
	if _, err := p.Probe(context.Background(), tg); err != nil {
		t.Errorf("204 expected and answered: %v", err)
	}
	tg = target(fp.URL, srv.URL+"/redirect", nil)
	tg.HealthCheck.ExpectedStatus = http.StatusFound
	hits := o.hits.Load()
	if _, err := p.Probe(context.Background(), tg); err != nil {
		t.Errorf("302 expected and answered: %v", err)
	}
	if got := o.hits.Load() - hits; got != 1 {
		t.Errorf("redirect followed: %d origin hits", got)
	}
}

func TestProbeTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	fp := newForwardProxy(t)
	tg := target(fp.URL, srv.URL+"/", nil)
	tg.HealthCheck.TimeoutSeconds = 1
	lat, err := health.NewHTTPProber(nil, dialpolicy.Denylist{}).Probe(context.Background(), tg)
	if !health.IsTimeout(err) {
		t.Fatalf("error %v, want a timeout", err)
	}
	if lat < 900*time.Millisecond || lat > 5*time.Second {
		t.Errorf("timed out after %s, want about 1s", lat)
	}
}

func TestProbeProxyDown(t *testing.T) {
	_, srv := newOrigin(t, false)
	fp := newForwardProxy(t)
	url := fp.URL
	if err := fp.Close(); err != nil {
		t.Fatal(err)
	}
	// The origin is up: only going through the (dead) proxy can fail.
	_, err := health.NewHTTPProber(nil, dialpolicy.Denylist{}).Probe(context.Background(), target(url, srv.URL+"/", nil))
	if !health.IsTransport(err) || !strings.Contains(err.Error(), "connecting to the proxy: connection refused") {
		t.Fatalf("error %v, want a transport error reaching the proxy", err)
	}
}

func TestProbeInvalidTarget(t *testing.T) {
	p := health.NewHTTPProber(nil, dialpolicy.Denylist{})
	for _, tg := range []health.Target{
		target("", "http://example.com/", nil),
		target("http://[::1", "http://example.com/", nil),
		target("http://127.0.0.1:1", "ftp://example.com/", nil),
		target("http://127.0.0.1:1", "/relative", nil),
	} {
		if _, err := p.Probe(context.Background(), tg); !health.IsInvalidTarget(err) {
			t.Errorf("proxy %q url %q: error %v, want invalid target", tg.ProxyURL, tg.HealthCheck.URL, err)
		}
	}
}

// fakePeer is a healthtest.ReplyPeer's URL; the peer stops with the test.
func fakePeer(t *testing.T, reply string) string {
	t.Helper()
	p, err := healthtest.NewReplyPeer(reply)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return "http://" + p.Addr
}

// A failed probe says what failed in this operator's words: what the remote
// end sent (a banner of something that is not a proxy, a proxy's refusal
// text) never reaches the message, which goes into the Proxy's status and
// Events. Control: the library's error, kept as the cause for logs, does
// quote it, so each case would leak without the rewording.
func TestProbeErrorsQuoteNothingRemote(t *testing.T) {
	_, tlsOrigin := newOrigin(t, true)
	fp := newForwardProxy(t)
	const secret = "secret-internal-banner"
	for _, tc := range []struct {
		name, proxy, url string
		want             string
		causeQuotes      bool
	}{
		{"not a proxy (an SSH banner)", fakePeer(t, "SSH-2.0-OpenSSH_9.6 "+secret+"\r\n"), "http://example.com/",
			"the request through the proxy: no valid HTTP answer", true},
		{"CONNECT refused with the proxy's own text", fakePeer(t, "HTTP/1.1 403 "+secret+"\r\nContent-Length: 0\r\n\r\n"), "https://example.com/",
			"the request through the proxy: no valid HTTP answer", true},
		{"an untrusted certificate", fp.URL, tlsOrigin.URL + "/", "the request through the proxy: TLS certificate not accepted", false},
	} {
		_, err := health.NewHTTPProber(nil, dialpolicy.Denylist{}).Probe(context.Background(), target(tc.proxy, tc.url, nil))
		if !health.IsTransport(err) {
			t.Errorf("%s: %v, want a transport error", tc.name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, secret) || strings.Contains(msg, "SSH-2.0") {
			t.Errorf("%s: message %q, want %q and nothing the peer sent", tc.name, msg, tc.want)
		}
		var pe *health.ProbeError
		if !errors.As(err, &pe) || pe.Cause == nil {
			t.Errorf("%s: %T keeps no cause", tc.name, err)
			continue
		}
		if tc.causeQuotes && !strings.Contains(pe.Cause.Error(), secret) {
			t.Errorf("%s: control: the library's error %q does not quote the peer; this case shows nothing", tc.name, pe.Cause)
		}
	}
}

// A probe reaches nothing the Denylist denies: not a proxy at a denied
// address (no connection is made), not a health check URL whose host is or
// resolves to one (the proxy is not asked). The refusal is an invalid
// target naming the flag. Control: the same probes with an empty Denylist
// succeed.
func TestProbeReachesNothingDenied(t *testing.T) {
	_, srv := newOrigin(t, false)
	fp := newForwardProxy(t)
	originAddr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	for _, tc := range []struct {
		name   string
		denied dialpolicy.Denylist
		url    string
	}{
		// The URL's host (TEST-NET-1) is allowed: the dial to the proxy is
		// what is refused.
		{"a proxy in a denied network", dialpolicy.Denylist{Prefixes: []netip.Prefix{loopback}}, "http://192.0.2.1/"},
		{"a URL host in a denied network", dialpolicy.Denylist{Prefixes: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}}, "http://169.254.169.254/latest/meta-data/"},
		{"a URL host name resolving to a denied endpoint", dialpolicy.Denylist{Endpoints: []netip.AddrPort{originAddr}},
			fmt.Sprintf("http://localhost:%d/", originAddr.Port())},
	} {
		conns := fp.Conns()
		_, err := health.NewHTTPProber(nil, tc.denied).Probe(context.Background(), target(fp.URL, tc.url, nil))
		if !health.IsInvalidTarget(err) || !strings.Contains(err.Error(), "--health-denied-cidrs") {
			t.Errorf("%s: %v, want an invalid target naming --health-denied-cidrs", tc.name, err)
		}
		if got := fp.Conns() - conns; got != 0 {
			t.Errorf("%s: the proxy got %d connections", tc.name, got)
		}
	}
	for _, url := range []string{srv.URL + "/", fmt.Sprintf("http://localhost:%d/", originAddr.Port())} {
		if _, err := health.NewHTTPProber(nil, dialpolicy.Denylist{}).Probe(context.Background(), target(fp.URL, url, nil)); err != nil {
			t.Errorf("control: %s with nothing denied: %v", url, err)
		}
	}
}
