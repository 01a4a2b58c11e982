package nodeagent

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

var authProxy = proxyauth.ProxyRef{Namespace: "team", Name: "squid-1"}

// startAuthSquid starts squid checking credentials of authProxy under k (or,
// with k nil, open) and returns its address.
func startAuthSquid(t testing.TB, k *proxyauth.Keyring) string {
	t.Helper()
	return startAuthSquidPolling(t, k, "")
}

// startAuthSquidPolling is startAuthSquid with a helper that polls its live
// list at operatorURL ("": none).
func startAuthSquidPolling(t testing.TB, k *proxyauth.Keyring, operatorURL string) string {
	t.Helper()
	cfg := freeTestAddr(t)
	if k != nil {
		helper, err := LookAuthHelper("")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.AuthHelper, err = InstallAuthHelper(helper, cfg.Dir); err != nil {
			t.Fatal(err)
		}
		// The tests' origins are on loopback, any port: opened as the
		// operator's --proxy-allowed-* flags would.
		local, err := proxyauth.ParseEgress([]string{"127.0.0.0/8"}, nil, []string{"1-65535"})
		if err != nil {
			t.Fatal(err)
		}
		hc := k.HelperConfig(authProxy, operatorURL, "")
		hc.Egress = local
		cfg.AuthConfig = hc.Marshal()
		cfg.AccessRules = proxyauth.SquidLeaseRules(local)
	}
	sq, err := StartSquid(testSquidPath(t), cfg, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sq.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("squid's cache.log:\n%s", logtail.File(cfg.CacheLogPath(), 200))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := WaitListening(ctx, cfg.ListenAddr(), sq.Done()); err != nil {
		t.Fatalf("%v\n%s", err, logtail.File(cfg.CacheLogPath(), 20))
	}
	return cfg.ListenAddr()
}

func testKeyring(t testing.TB) *proxyauth.Keyring {
	t.Helper()
	k, err := proxyauth.NewKeyring(bytes.Repeat([]byte{9}, proxyauth.MinKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// authSquidAndOrigin starts squid checking credentials under a test keyring,
// and an origin answering "origin".
func authSquidAndOrigin(t *testing.T) (k *proxyauth.Keyring, addr string, origin *httptest.Server) {
	t.Helper()
	k = testKeyring(t)
	addr = startAuthSquid(t, k)
	origin = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("origin")) }))
	t.Cleanup(origin.Close)
	return k, addr, origin
}

// With an auth config, squid runs our helper and serves a lease's
// credentials of its own proxy only (407 otherwise); the config the agent
// renders is the one every proxy of the operator runs.
func TestSquidChecksCredentials(t *testing.T) {
	k, addr, origin := authSquidAndOrigin(t)
	now := time.Now()
	good := k.LeaseCredentials(authProxy, "l1", now, now.Add(time.Minute))
	expired := k.LeaseCredentials(authProxy, "l2", now.Add(-time.Hour), now.Add(-time.Minute))
	other := k.LeaseCredentials(proxyauth.ProxyRef{Namespace: "team", Name: "squid-2"}, "l1", now, now.Add(time.Minute))
	for _, tc := range []struct {
		name string
		user *url.Userinfo
		want int
	}{
		{"none", nil, http.StatusProxyAuthRequired},
		{"a lease of this proxy", good.Userinfo(), http.StatusOK},
		{"expired", expired.Userinfo(), http.StatusProxyAuthRequired},
		{"another proxy's", other.Userinfo(), http.StatusProxyAuthRequired},
		{"a probe", k.ProbeCredentials(authProxy).Userinfo(), http.StatusOK},
	} {
		if code, err := StatusThrough(addr, tc.user, origin.URL); err != nil || code != tc.want {
			t.Errorf("%s: HTTP %d (%v), want %d", tc.name, code, err, tc.want)
		}
	}
}

// A Squid checking credentials keeps serving through 10,000 hostile
// authentication attempts from clients without a lease: over-long
// passwords (one of 7,000 bytes stopped it: its helper exited on a line
// over 4,096 bytes, and Squid gives up on a helper that dies too often),
// malformed headers and forged signatures. Every one is refused and a
// lease's request is served after them.
func TestSquidKeepsServingUnderHostileAuthentication(t *testing.T) {
	k, addr, origin := authSquidAndOrigin(t)
	now := time.Now()
	good := k.LeaseCredentials(authProxy, "l1", now, now.Add(time.Hour))
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	hostile := []func(i int) string{
		func(i int) string { return basic(good.Username, strings.Repeat("p", 7000+i%100)) },
		func(i int) string { return basic(strings.Repeat("u", 5000), strconv.Itoa(i)) },
		func(i int) string {
			return basic(good.Username, good.Password[:len(good.Password)-2]+strconv.Itoa(10+i%90))
		},
		func(i int) string { return basic(strconv.Itoa(i)+" "+strconv.Itoa(i), "% %zz\t\x00") },
		func(i int) string { return "Basic " + strings.Repeat("!", i%50) },
		func(i int) string {
			return "Basic " + base64.StdEncoding.EncodeToString([]byte("no-colon-"+strconv.Itoa(i)))
		},
		func(i int) string { return basic("", "") },
	}
	const attempts, workers = 10_000, 8
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr}), MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var next, served, failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= attempts {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, origin.URL, nil)
				req.Header.Set("Proxy-Authorization", hostile[i%len(hostile)](i))
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode < 400 {
					served.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := min(next.Load(), attempts); n < attempts {
		t.Fatalf("only %d of %d attempts in 3 minutes", n, attempts)
	}
	if served.Load() != 0 || failed.Load() != 0 {
		t.Errorf("of %d hostile attempts, %d served, %d without an answer; want every one refused", attempts, served.Load(), failed.Load())
	}
	if code, err := StatusThrough(addr, good.Userinfo(), origin.URL); err != nil || code != http.StatusOK {
		t.Fatalf("a lease's request after the attempts: HTTP %d (%v), want 200", code, err)
	}
}

// BenchmarkSquidThroughput measures requests per second through one squid,
// open and checking credentials (docs/benchmarks.md): keep-alive clients,
// 4 per core, each request authenticated; "auth-fresh" sends new
// credentials with every request (a lease per request), so that Squid's
// cache never answers and every request costs a helper call.
func BenchmarkSquidThroughput(b *testing.B) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("origin")) }))
	defer origin.Close()
	k := testKeyring(b)
	now := time.Now()
	creds := k.LeaseCredentials(authProxy, "bench", now, now.Add(time.Hour))
	var n atomic.Int64
	fresh := func(addr string) func(*http.Request) (*url.URL, error) {
		return func(*http.Request) (*url.URL, error) {
			c := k.LeaseCredentials(authProxy, strconv.FormatInt(n.Add(1), 10), now, now.Add(time.Hour))
			return &url.URL{Scheme: "http", Host: addr, User: c.Userinfo()}, nil
		}
	}
	for _, tc := range []struct {
		name  string
		k     *proxyauth.Keyring
		proxy func(addr string) func(*http.Request) (*url.URL, error)
	}{
		{"open", nil, func(addr string) func(*http.Request) (*url.URL, error) {
			return http.ProxyURL(&url.URL{Scheme: "http", Host: addr})
		}},
		{"auth", k, func(addr string) func(*http.Request) (*url.URL, error) {
			return http.ProxyURL(&url.URL{Scheme: "http", Host: addr, User: creds.Userinfo()})
		}},
		{"auth-fresh", k, fresh},
	} {
		b.Run(tc.name, func(b *testing.B) {
			addr := startAuthSquid(b, tc.k)
			tr := &http.Transport{Proxy: tc.proxy(addr), MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Get(origin.URL)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("HTTP %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}
