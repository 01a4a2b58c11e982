package deve2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/gateway"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/tunneltest"
)

// gatewaySessionIdle is the dev test's --gateway-session-idle: sessions end
// soon after the steps that use them, leaving the fleet free for the next.
const gatewaySessionIdle = 3 * time.Second

// gatewayProxy is the gateway's URL with username and the token as
// credentials (a client's whole configuration).
func (h *harness) gatewayProxy(username, token string) string {
	return "http://" + url.UserPassword(username, token).String() + "@" + strings.TrimPrefix(h.env.GatewayURL, "http://")
}

// viaGateway fetches target through the gateway as curl does, returning the
// status, the headers (a CONNECT's answer first) and the body.
func (h *harness) viaGateway(t *testing.T, proxy, target string, extra ...string) (int, string, string) {
	t.Helper()
	code, headers, body, err := curlVia(t.TempDir(), proxy, target, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return code, headers, body
}

// curlVia is viaGateway for goroutines, writing the headers under dir.
func curlVia(dir, proxy, target string, extra ...string) (int, string, string, error) {
	hdr := filepath.Join(dir, "headers")
	args := append([]string{"-sS", "--max-time", "30", "--noproxy", "", "-x", proxy, "-D", hdr, "-w", "\n%{http_code}"}, extra...)
	out, err := exec.Command("curl", append(args, target)...).CombinedOutput()
	if err != nil {
		return 0, "", "", fmt.Errorf("curl -x %s %s: %w: %s", proxy, target, err, out)
	}
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(s, '\n')
	code, _ := strconv.Atoi(s[i+1:])
	headers, _ := os.ReadFile(hdr)
	return code, string(headers), s[:max(i, 0)], nil
}

var (
	leaseIDHeader = regexp.MustCompile(`(?mi)^X-Proxy-Lease-ID: (\S+)`)
	viaOf         = regexp.MustCompile(`via="([^"]*)"`)
)

// via is the proxy an origin answer went through (squid's Via names its
// visible_hostname: the pod's or the VM's name).
func via(t *testing.T, body string) string {
	t.Helper()
	m := viaOf.FindStringSubmatch(body)
	if m == nil || m[1] == "" {
		t.Fatalf("the origin's answer names no Via: %q", body)
	}
	return m[1]
}

// activeLeases is how many leases the fleet holds now.
func activeLeases(t *testing.T, c *dclient.Client) int {
	t.Helper()
	ps, err := c.ListProxies(context.Background(), dclient.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range ps {
		n += p.ActiveLeases
	}
	return n
}

// awaitNoLeases waits for every lease the gateway took to be released.
func awaitNoLeases(t *testing.T, c *dclient.Client, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for activeLeases(t, c) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d leases still held %s after the gateway's requests ended", activeLeases(t, c), within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// gateway runs real clients through the gateway: curl (plain HTTP and a TLS
// site through CONNECT), sticky sessions, a 429 that moves a session and
// cools only that host, bad credentials, Python's urllib and Scrapy.
func (h *harness) gateway(t *testing.T) {
	token := h.env.DiscoveryToken
	api := leaseClient(t, h.env, "")
	awaitNoLeases(t, api, 30*time.Second)
	if b, err := os.ReadFile(filepath.Join(h.env.Dir, "gateway-url")); err != nil || strings.TrimSpace(string(b)) != h.env.GatewayURL {
		t.Fatalf(".dev/gateway-url = %q, %v; want %s", b, err, h.env.GatewayURL)
	}

	t.Run("curl: a lease per request, released after it; requests at once go through different proxies", func(t *testing.T) {
		for i := range 4 {
			code, headers, body := h.viaGateway(t, h.gatewayProxy("", token), fmt.Sprintf("%s/gateway-%d", h.env.OriginURL, i))
			if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf("GET /gateway-%d", i)) {
				t.Fatalf("through the gateway: %d %q", code, body)
			}
			if !leaseIDHeader.MatchString(headers) {
				t.Errorf("the answer carries no X-Proxy-Lease-ID header:\n%s", headers)
			}
		}
		awaitNoLeases(t, api, 10*time.Second)
		// A site that answers once three requests are in: each holds its
		// own lease meanwhile, so each goes through another proxy.
		const n = 3
		var arrived sync.WaitGroup
		arrived.Add(n)
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived.Done()
			waitTimeout(&arrived, 20*time.Second)
			fmt.Fprintf(w, "via=%q", r.Header.Get("Via"))
		}))
		defer site.Close()
		vias := make(chan string, n)
		var wg sync.WaitGroup
		for i := range n {
			dir := filepath.Join(t.TempDir(), strconv.Itoa(i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				_, _, body, err := curlVia(dir, h.gatewayProxy("", token), site.URL+"/at-once")
				if err != nil {
					t.Error(err)
				}
				vias <- body
			})
		}
		wg.Wait()
		close(vias)
		seen := map[string]bool{}
		for b := range vias {
			if m := viaOf.FindStringSubmatch(b); m != nil {
				seen[m[1]] = true
			}
		}
		if len(seen) != n {
			t.Errorf("%d requests at once went through %v: want %d proxies", n, seen, n)
		}
		awaitNoLeases(t, api, 10*time.Second)
	})

	t.Run("a TLS site through CONNECT: the tunnel is not opened, the lease is named", func(t *testing.T) {
		site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "tls origin: %s %s", r.Method, r.URL.Path)
		}))
		defer site.Close()
		code, headers, body := h.viaGateway(t, h.gatewayProxy("scrapy", token), site.URL+"/over-tls", "-k")
		if code != http.StatusOK || body != "tls origin: GET /over-tls" {
			t.Fatalf("https through the gateway: %d %q", code, body)
		}
		if !strings.Contains(headers, "200 Connection established") || !leaseIDHeader.MatchString(headers) {
			t.Errorf("the CONNECT answer lacks the lease's ID:\n%s", headers)
		}
		// A Go client that trusts the site's certificate alone completes the
		// handshake: the tunnel carried the site's TLS, not the gateway's.
		gw, _ := url.Parse(h.gatewayProxy("", token))
		roots := x509.NewCertPool()
		roots.AddCert(site.Certificate())
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(gw),
			TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
		resp, err := hc.Get(site.URL + "/verified")
		if err != nil {
			t.Fatalf("https through the gateway, verified against the site's own certificate: %v", err)
		}
		resp.Body.Close()
		hc.CloseIdleConnections()
		awaitNoLeases(t, api, 10*time.Second)
	})

	var s1Via, cooledRegion string
	t.Run("sticky sessions: one egress for 20 requests, other sessions other proxies", func(t *testing.T) {
		vias := map[string]string{}
		for _, s := range []string{"s1", "s2", "s3"} {
			code, _, body := h.viaGateway(t, h.gatewayProxy("session-"+s, token), h.env.OriginURL+"/sticky-"+s)
			if code != http.StatusOK {
				t.Fatalf("session %s: %d %q", s, code, body)
			}
			vias[s] = via(t, body)
		}
		if vias["s1"] == vias["s2"] || vias["s1"] == vias["s3"] || vias["s2"] == vias["s3"] {
			t.Fatalf("three sessions share proxies: %v", vias)
		}
		for i := range 20 {
			s := []string{"s1", "s2", "s3"}[i%3]
			_, _, body := h.viaGateway(t, h.gatewayProxy("session-"+s, token), h.env.OriginURL+"/sticky-again")
			if got := via(t, body); got != vias[s] {
				t.Fatalf("request %d of session %s went through %s, want its proxy %s", i, s, got, vias[s])
			}
		}
		for range 20 {
			_, _, body := h.viaGateway(t, h.gatewayProxy("session-s1", token), h.env.OriginURL+"/sticky-s1")
			if got := via(t, body); got != vias["s1"] {
				t.Fatalf("session s1 moved from %s to %s", vias["s1"], got)
			}
		}
		if n := activeLeases(t, api); n != 3 {
			t.Errorf("three sessions hold %d leases, want 3", n)
		}
		s1Via = vias["s1"]
	})

	t.Run("a 429 over plain HTTP cools that proxy for that host only, and the session moves", func(t *testing.T) {
		if s1Via == "" {
			t.Skip("needs the sessions above")
		}
		code, headers, body := h.viaGateway(t, h.gatewayProxy("session-s1", token), h.env.OriginURL+"/status/429")
		if code != http.StatusTooManyRequests || via(t, body) != s1Via {
			t.Fatalf("the origin's 429 through session s1: %d %q, want 429 through %s", code, body, s1Via)
		}
		m := leaseIDHeader.FindStringSubmatch(headers)
		if m == nil {
			t.Fatalf("the 429 carries no lease ID:\n%s", headers)
		}
		l, err := api.Get(context.Background(), m[1])
		if err != nil {
			t.Fatalf("reading the session's lease: %v", err)
		}
		// The next request of s1 to that host moves; one to another host name
		// of the same origin would not have to.
		_, _, body = h.viaGateway(t, h.gatewayProxy("session-s1", token), h.env.OriginURL+"/after-429")
		if got := via(t, body); got == s1Via {
			t.Fatalf("session s1 stayed on %s after its 429 for 127.0.0.1", got)
		}
		host := "127.0.0.1"
		only := map[string]string{"region": l.Proxy.Attributes["region"]}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := api.Acquire(context.Background(), wire.AcquireRequest{Selector: only, Target: host, TTLSeconds: 30})
			var ae *dclient.APIError
			if dclient.IsNoMatch(err) && errors.As(err, &ae) && ae.NoMatch.InCooldown == 1 {
				break
			}
			if err == nil || time.Now().After(deadline) {
				t.Fatalf("a lease of %s for %s: %v, want no_match with 1 in cooldown", l.Proxy.Name, host, err)
			}
			time.Sleep(200 * time.Millisecond) // the old session lease is released in the background
		}
		other, err := api.Acquire(context.Background(), wire.AcquireRequest{Selector: only, Target: "localhost", TTLSeconds: 30})
		if err != nil {
			t.Fatalf("a lease of %s for another host: %v, want granted (the cooldown is for %s only)", l.Proxy.Name, err, host)
		}
		if err := api.Release(context.Background(), other.LeaseID); err != nil {
			t.Fatal(err)
		}
		cooledRegion = only["region"]
	})

	// As Chromium's background requests begin a browser's session: the
	// session's lease is granted for another host, on the one proxy its
	// selector allows, which cools for the origin.
	t.Run("a session leased for another host never takes a host through a proxy cooling for it", func(t *testing.T) {
		if cooledRegion == "" {
			t.Skip("needs the cooldown above")
		}
		background := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "background via=%q\n", r.Header.Get("Via"))
		}))
		ln, err := net.Listen("tcp", "127.0.9.250:0") // in this package's range, outside its pools
		if err != nil {
			t.Fatal(err)
		}
		background.Listener = ln
		background.Start()
		defer background.Close()
		proxy := h.gatewayProxy("region-"+cooledRegion+".session-background", token)
		code, _, body := h.viaGateway(t, proxy, background.URL+"/first")
		if code != http.StatusOK || via(t, body) != s1Via {
			t.Fatalf("the session's first request, to another host: %d %q, want 200 through %s", code, body, s1Via)
		}
		code, _, body = h.viaGateway(t, proxy, h.env.OriginURL+"/through-the-cooled-proxy")
		if code == http.StatusOK {
			t.Fatalf("the session took 127.0.0.1 through %s, which cools for it: %q", s1Via, body)
		}
		if code != http.StatusTooManyRequests || !strings.Contains(body, "1 cooling down for this host") {
			t.Errorf("the session's request to the host its proxy cools for: %d %q, want the gateway's 429 (its only proxy cools)", code, body)
		}
	})

	t.Run("a tunnel ends within 30 s of its lease's release through the API; another goes on", func(t *testing.T) {
		awaitNoLeases(t, api, 4*gatewaySessionIdle)
		echo := tunneltest.EchoServer(t)
		gone, goneID := gatewayTunnel(t, h.env.GatewayURL, "session-cut", token, echo)
		kept, _ := gatewayTunnel(t, h.env.GatewayURL, "session-kept", token, echo)
		if !tunneltest.Relays(gone) || !tunneltest.Relays(kept) {
			t.Fatal("the tunnels through the gateway do not relay")
		}
		// The holder (the same token) releases the lease through the API.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := api.Release(ctx, goneID); err != nil {
			t.Fatalf("releasing %s: %v", goneID, err)
		}
		released := time.Now()
		for tunneltest.Relays(gone) && time.Since(released) < 45*time.Second {
			time.Sleep(200 * time.Millisecond)
		}
		took := time.Since(released)
		t.Logf("the released lease's tunnel closed %s after the release", took.Round(100*time.Millisecond))
		if took > 30*time.Second {
			t.Errorf("the released lease's tunnel relayed %s after the release; want at most 30s", took)
		}
		if !tunneltest.Relays(kept) {
			t.Error("the other session's tunnel was closed")
		}
		_ = kept.Close()
		awaitNoLeases(t, api, 4*gatewaySessionIdle)
	})

	t.Run("idle sessions end and release their leases", func(t *testing.T) {
		awaitNoLeases(t, api, 4*gatewaySessionIdle)
	})

	t.Run("errors a crawler can act on", func(t *testing.T) {
		for _, tc := range []struct {
			name, proxy string
			code        int
			reason      string
		}{
			{"no credentials", h.env.GatewayURL, http.StatusProxyAuthRequired, "unauthorized"},
			{"a wrong token", h.gatewayProxy("", "not-the-token"), http.StatusProxyAuthRequired, "unauthorized"},
			{"a bad option", h.gatewayProxy("priority-high", token), http.StatusBadRequest, "invalid_request"},
			{"a namespace of no proxy", h.gatewayProxy("ns-nowhere", token), http.StatusTooManyRequests, "busy"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, headers, body := h.viaGateway(t, tc.proxy, h.env.OriginURL+"/refused")
				var b struct{ Error, Message string }
				if code != tc.code || json.Unmarshal([]byte(body), &b) != nil || b.Error != tc.reason || b.Message == "" {
					t.Fatalf("%s: %d %q, want %d with a JSON body, error %q and a message", tc.name, code, body, tc.code, tc.reason)
				}
				if tc.code == http.StatusProxyAuthRequired && !strings.Contains(strings.ToLower(headers), "proxy-authenticate: basic") {
					t.Errorf("a 407 without Proxy-Authenticate:\n%s", headers)
				}
			})
		}
	})

	t.Run("a pod's ServiceAccount token, as RBAC allows", func(t *testing.T) {
		root, err := controlplane.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		manifest, err := os.ReadFile(filepath.Join(root, "artifacts", "apiserver", "examples", "crawler-rbac.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		h.mustKubectlIn(t, strings.ReplaceAll(string(manifest), "namespace: crawlers", "namespace: default"), "apply", "-f", "-")
		h.mustKubectl(t, "-n", "default", "create", "serviceaccount", "gateway-stranger")
		crawler := strings.TrimSpace(h.mustKubectl(t, "-n", "default", "create", "token", "crawler"))
		stranger := strings.TrimSpace(h.mustKubectl(t, "-n", "default", "create", "token", "gateway-stranger"))
		code, _, body := h.viaGateway(t, h.gatewayProxy("crawler", crawler), h.env.OriginURL+"/service-account")
		if code != http.StatusOK || !strings.Contains(body, "GET /service-account") {
			t.Fatalf("with the crawler ServiceAccount's token: %d %q", code, body)
		}
		code, _, body = h.viaGateway(t, h.gatewayProxy("crawler", stranger), h.env.OriginURL+"/service-account")
		if code != http.StatusForbidden || !strings.Contains(body, "proxy-operator:crawler") {
			t.Errorf("with a ServiceAccount RBAC does not allow: %d %q, want 403 naming the role to bind", code, body)
		}
		awaitNoLeases(t, api, 10*time.Second)
	})

	t.Run("Python urllib and Scrapy with the gateway as their proxy", func(t *testing.T) {
		py := framework.ScrapyPython(t)
		// Any username without options: urllib and Scrapy send no
		// credentials with an empty one.
		proxy := h.gatewayProxy("crawler", token)
		script := `import sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": sys.argv[1]}))
print(opener.open(sys.argv[2], timeout=30).read().decode())`
		out, err := exec.Command(py, "-c", script, proxy, h.env.OriginURL+"/urllib").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "GET /urllib") {
			t.Errorf("urllib through the gateway: %v %s", err, out)
		}
		items := filepath.Join(t.TempDir(), "items.json")
		cmd := exec.Command(py, "-m", "scrapy", "runspider", filepath.Join("testdata", "gateway_spider.py"), "-O", items)
		cmd.Env = append(os.Environ(), "http_proxy="+proxy, "no_proxy=",
			"GATEWAY_SPIDER_URLS="+h.env.OriginURL+"/scrapy-1 "+h.env.OriginURL+"/scrapy-2 "+h.env.OriginURL+"/scrapy-3")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scrapy runspider: %v\n%s", err, out)
		}
		var got []struct {
			Status      int
			Body, Lease string
		}
		b, _ := os.ReadFile(items)
		if err := json.Unmarshal(b, &got); err != nil || len(got) != 3 {
			t.Fatalf("scrapy's items: %v %s", err, b)
		}
		for _, it := range got {
			if it.Status != http.StatusOK || !strings.Contains(it.Body, "GET /scrapy-") || it.Lease == "" {
				t.Errorf("a Scrapy item: %+v", it)
			}
		}
		awaitNoLeases(t, api, 10*time.Second)
	})

	t.Run("counted per outcome", func(t *testing.T) {
		for series, want := range map[string]bool{
			`proxy_operator_gateway_requests_total{kind="connect",outcome="ok"}`:        true,
			`proxy_operator_gateway_requests_total{kind="http",outcome="unauthorized"}`: true,
			`proxy_operator_gateway_requests_total{kind="http",outcome="ok"}`:           true,
			`proxy_operator_gateway_bytes_total{direction="down"}`:                      true,
		} {
			if v := h.metric(t, h.env.MetricsURL, series); (v != "" && v != "0") != want {
				t.Errorf("%s = %q", series, v)
			}
		}
		if v := h.metric(t, h.env.MetricsURL, `proxy_operator_gateway_tunnels`); v != "0" {
			t.Errorf("proxy_operator_gateway_tunnels = %q after every tunnel closed, want 0", v)
		}
	})
}

// waitTimeout waits for wg, at most d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// gatewayTunnel opens a CONNECT tunnel to target through the gateway at
// gatewayURL with username and token, and returns it and its lease's ID.
func gatewayTunnel(t *testing.T, gatewayURL, username, token, target string) (net.Conn, string) {
	t.Helper()
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(username+":"+token))
	conn, resp, err := tunneltest.Tunnel(strings.TrimPrefix(gatewayURL, "http://"), auth, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, resp.Header.Get(gateway.LeaseIDHeader)
}
