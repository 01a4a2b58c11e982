package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// headerEcho records the headers of each request it gets and answers with
// the headers it is given: the site behind httputil.ReverseProxy, and the
// leased proxy behind the gateway.
type headerEcho struct {
	mu   sync.Mutex
	seen http.Header
	send http.Header
}

func (e *headerEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.seen = r.Header.Clone()
	for k, vs := range e.send {
		w.Header()[k] = vs
	}
	e.mu.Unlock()
	io.WriteString(w, "ok")
}

// endToEnd drops what the client, either proxy and the servers add of their
// own, leaving what was forwarded.
func endToEnd(h http.Header) http.Header {
	h = h.Clone()
	for _, k := range []string{"Accept-Encoding", "User-Agent", "X-Forwarded-For", "Proxy-Authorization",
		"Date", "Content-Length", "Content-Type", LeaseIDHeader} {
		h.Del(k)
	}
	return h
}

// Hop-by-hop headers (RFC 9110 §7.6.1) go no further than the gateway, in
// either direction: the fixed list, and every field a Connection header
// names. What reaches the site and what comes back to the client are what
// httputil.ReverseProxy lets through, and each case also names the fields
// that must not pass (a fixed list alone passes the Connection-named ones).
func TestForwardHopByHop(t *testing.T) {
	cases := []struct {
		name      string
		req, resp http.Header
		dropped   []string // neither at the site nor at the client
		kept      []string
	}{{
		name:    "connection names a field",
		req:     http.Header{"Connection": {"X-Hop"}, "X-Hop": {"1"}, "X-End": {"2"}},
		resp:    http.Header{"Connection": {"X-Secret"}, "X-Secret": {"s"}, "X-Kept": {"k"}},
		dropped: []string{"X-Hop", "X-Secret", "Connection"},
		kept:    []string{"X-End", "X-Kept"},
	}, {
		name:    "several tokens, any case, spaces",
		req:     http.Header{"Connection": {"keep-alive , x-a,X-B"}, "X-A": {"1"}, "X-B": {"2"}, "X-C": {"3"}},
		resp:    http.Header{"Connection": {" x-d ,keep-alive"}, "X-D": {"4"}, "X-E": {"5"}},
		dropped: []string{"X-A", "X-B", "X-D"},
		kept:    []string{"X-C", "X-E"},
	}, {
		name:    "two Connection lines",
		req:     http.Header{"Connection": {"X-A", "X-B"}, "X-A": {"1"}, "X-B": {"2"}, "X-C": {"3"}},
		resp:    http.Header{"Connection": {"X-D", "X-E"}, "X-D": {"4"}, "X-E": {"5"}, "X-F": {"6"}},
		dropped: []string{"X-A", "X-B", "X-D", "X-E"},
		kept:    []string{"X-C", "X-F"},
	}, {
		name:    "the fixed list",
		req:     http.Header{"Keep-Alive": {"timeout=5"}, "Proxy-Connection": {"keep-alive"}, "Te": {"deflate"}, "Trailer": {"X-T"}},
		resp:    http.Header{"Keep-Alive": {"timeout=5"}, "Proxy-Connection": {"keep-alive"}, "Upgrade": {"h2c"}},
		dropped: []string{"Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade"},
	}, {
		name: "te: trailers is end to end",
		req:  http.Header{"Te": {"deflate, Trailers"}},
		kept: []string{"Te"},
	}, {
		name:    "te: trailers with a parameter is not (RFC 9110 §10.1.4 gives it none)",
		req:     http.Header{"Te": {"trailers;q=1"}},
		dropped: []string{"Te"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The reference: httputil.ReverseProxy in front of a site.
			site := &headerEcho{send: tc.resp}
			siteSrv := httptest.NewServer(site)
			defer siteSrv.Close()
			siteURL, _ := url.Parse(siteSrv.URL)
			rp := httptest.NewServer(httputil.NewSingleHostReverseProxy(siteURL))
			defer rp.Close()
			// The gateway, leasing the proxy that echoes.
			leased := &headerEcho{send: tc.resp}
			leasedSrv := httptest.NewServer(leased)
			defer leasedSrv.Close()
			gwClient, _ := gatewayClient(t, Deps{Leaser: proxiedLeaser{newFakeLeaser(time.Now), leasedSrv.URL}})

			get := func(c *http.Client, target string) http.Header {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, target, nil)
				for k, vs := range tc.req {
					req.Header[k] = vs
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %d", target, resp.StatusCode)
				}
				return resp.Header
			}
			refResp := get(&http.Client{}, rp.URL+"/page")
			gwResp := get(gwClient, "http://site.example/page")

			if diff := cmp.Diff(endToEnd(site.seen), endToEnd(leased.seen)); diff != "" {
				t.Errorf("forwarded to the site (-httputil.ReverseProxy +gateway):\n%s", diff)
			}
			if diff := cmp.Diff(endToEnd(refResp), endToEnd(gwResp)); diff != "" {
				t.Errorf("answered to the client (-httputil.ReverseProxy +gateway):\n%s", diff)
			}
			for _, k := range tc.dropped {
				if v, ok := leased.seen[k]; ok && tc.req.Get(k) != "" {
					t.Errorf("%s: %q reached the leased proxy", k, v)
				}
				if v, ok := gwResp[k]; ok && tc.resp.Get(k) != "" {
					t.Errorf("%s: %q reached the client", k, v)
				}
			}
			for _, k := range tc.kept {
				if leased.seen.Get(k) == "" && gwResp.Get(k) == "" {
					t.Errorf("%s was dropped; it is end to end", k)
				}
			}
		})
	}
}
