package gateway

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// upstreamProxy stands in for the leased proxy: it answers each absolute-form
// request with the status its path names, and records the credentials.
func upstreamProxy(t *testing.T, seen *[]string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*seen = append(*seen, r.Header.Get("Proxy-Authorization"))
		switch r.URL.Path {
		case "/429":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/407":
			w.WriteHeader(http.StatusProxyAuthRequired)
		}
		io.WriteString(w, "from "+r.URL.String())
	}))
	t.Cleanup(s.Close)
	return s
}

// Plain HTTP through the gateway: the lease's credentials go to the proxy,
// the answer carries the lease's ID, a 429 is reported for that host, and a
// 407 of the leased proxy is the gateway's 502, never a 407 the client would
// read as its own credentials refused.
func TestForward(t *testing.T) {
	var seen []string
	up := upstreamProxy(t, &seen)
	f := newFakeLeaser(time.Now)
	hc, _ := gatewayClient(t, Deps{Leaser: proxiedLeaser{f, up.URL}})
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := hc.Get("http://site.example" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, body := get("/ok")
	if resp.StatusCode != 200 || body != "from http://site.example/ok" || resp.Header.Get(LeaseIDHeader) == "" {
		t.Fatalf("through the gateway: %d %q, lease %q", resp.StatusCode, body, resp.Header.Get(LeaseIDHeader))
	}
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("u-l1:p")); len(seen) != 1 || seen[0] != want {
		t.Errorf("the proxy saw credentials %q, want the lease's %q", seen, want)
	}
	resp, _ = get("/429")
	if resp.StatusCode != http.StatusTooManyRequests || f.count("report l2 rate_limited site.example") != 1 {
		t.Errorf("a 429: %d, calls %v; want it passed on and reported for site.example", resp.StatusCode, f.calls)
	}
	resp, body = get("/407")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "upstream_failed") || resp.Header.Get("Proxy-Authenticate") != "" {
		t.Errorf("the leased proxy's 407: %d %q, want 502 upstream_failed", resp.StatusCode, body)
	}
	eventually(t, "every lease released", func() bool { return len(f.liveIDs()) == 0 })
}

// gatewayClient serves a gateway built with deps on a test server, closed
// with the test, and returns a client that uses it as its proxy with a
// crawler's token, and the server.
func gatewayClient(t *testing.T, deps Deps) (*http.Client, *httptest.Server) {
	t.Helper()
	g, err := New(DefaultOptions(), deps)
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	gwURL, _ := url.Parse(gw.URL)
	gwURL.User = url.UserPassword("crawler", "tok")
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(gwURL)}}, gw
}

// proxiedLeaser is fakeLeaser whose leases name the proxy at url.
type proxiedLeaser struct {
	*fakeLeaser
	url string
}

func (p proxiedLeaser) Acquire(ctx context.Context, token string, req wire.AcquireRequest) (*wire.Lease, error) {
	l, err := p.fakeLeaser.Acquire(ctx, token, req)
	if err == nil {
		u, _ := url.Parse(p.url)
		u.User = url.UserPassword(l.Credentials.Username, l.Credentials.Password)
		l.Proxy.URL = u.String()
	}
	return l, err
}
