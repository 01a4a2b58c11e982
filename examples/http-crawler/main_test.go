package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// fakeForwardProxy answers proxied requests itself (the target is never
// contacted): every request must arrive in absolute-URI form.
type fakeForwardProxy struct {
	mu     sync.Mutex
	seen   []string
	status int
}

func (p *fakeForwardProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, r.Method+" "+r.RequestURI)
	p.mu.Unlock()
	w.WriteHeader(p.status)
	_, _ = w.Write([]byte("hello from the target"))
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		wantResult string
		cooling    bool
	}{
		{"ok", 200, "ok", false},
		{"rate limited", 429, "rate_limited", true},
		{"banned", 403, "banned", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := &fakeForwardProxy{status: tc.status}
			proxySrv := httptest.NewServer(fp)
			defer proxySrv.Close()
			store, err := lease.New(lease.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			store.UpsertProxy(lease.ProxyInfo{Namespace: "crawl", Name: "squid-1", URL: proxySrv.URL,
				Attributes: map[string]string{"region": "eu"}, Healthy: true})
			leases := leasing.NewWithStore(store, leasing.DefaultOptions(), clock.RealClock{})
			defer func() { _ = leases.Shutdown(context.Background()) }()
			svc, err := leases.Service(leasing.APIHTTP, discovery.DefaultMaxWait, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := discovery.New(discovery.Options{Tokens: discovery.SingleToken("tok"), Service: svc})
			if err != nil {
				t.Fatal(err)
			}
			api := httptest.NewServer(s.Handler())
			defer api.Close()

			var out bytes.Buffer
			err = run(context.Background(), config{
				discoveryURL: api.URL, token: "tok", target: "http://site.test/page",
				selector: map[string]string{"region": "eu"}, ttl: time.Minute, timeout: 5 * time.Second,
			}, &out)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if len(fp.seen) != 1 || fp.seen[0] != "GET http://site.test/page" {
				t.Errorf("proxy saw %q, want one absolute-URI GET", fp.seen)
			}
			if !strings.Contains(out.String(), "reporting "+tc.wantResult) {
				t.Errorf("output %q does not report %s", out.String(), tc.wantResult)
			}
			if store.Active() != 0 {
				t.Errorf("lease not released")
			}
			_, err = store.Acquire(lease.AcquireRequest{Target: "site.test"})
			if cooling := lease.IsNoMatch(err); cooling != tc.cooling {
				t.Errorf("(proxy, site.test) cooling = %v, want %v (%v)", cooling, tc.cooling, err)
			}
		})
	}
}

func TestRunNoProxy(t *testing.T) {
	store, _ := lease.New(lease.Options{}, nil)
	leases := leasing.NewWithStore(store, leasing.DefaultOptions(), clock.RealClock{})
	defer func() { _ = leases.Shutdown(context.Background()) }()
	svc, _ := leases.Service(leasing.APIHTTP, discovery.DefaultMaxWait, nil)
	s, _ := discovery.New(discovery.Options{Tokens: discovery.SingleToken("tok"), Service: svc})
	api := httptest.NewServer(s.Handler())
	defer api.Close()
	err := run(context.Background(), config{discoveryURL: api.URL, token: "tok", target: "http://site.test/"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no proxy free: considered 0") {
		t.Errorf("run without proxies: %v", err)
	}
}

func TestParseSelector(t *testing.T) {
	got, err := parseSelector("region=eu,tier=gold")
	if err != nil || got["region"] != "eu" || got["tier"] != "gold" || len(got) != 2 {
		t.Errorf("parseSelector = %v, %v", got, err)
	}
	if _, err := parseSelector("region"); err == nil {
		t.Error("pair without = accepted")
	}
}

// TestRunVerifiesTheAPI: over https the example trusts the -ca-file CA, and
// refuses a server it cannot verify.
func TestRunVerifiesTheAPI(t *testing.T) {
	store, _ := lease.New(lease.Options{}, nil)
	leases := leasing.NewWithStore(store, leasing.DefaultOptions(), clock.RealClock{})
	defer func() { _ = leases.Shutdown(context.Background()) }()
	svc, _ := leases.Service(leasing.APIHTTP, discovery.DefaultMaxWait, nil)
	s, _ := discovery.New(discovery.Options{Tokens: discovery.SingleToken("tok"), Service: svc})
	api := httptest.NewTLSServer(s.Handler())
	defer api.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config{discoveryURL: api.URL, token: "tok", target: "http://site.test/", caFile: caFile}
	// With the CA the API answers (no proxy: the API's own no_match).
	if err := run(context.Background(), cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no proxy free") {
		t.Errorf("with -ca-file: %v, want the API's no_match", err)
	}
	cfg.caFile = ""
	var unknown x509.UnknownAuthorityError
	if err := run(context.Background(), cfg, &bytes.Buffer{}); !errors.As(err, &unknown) {
		t.Errorf("without -ca-file: %v, want an unknown-authority error", err)
	}
}

// The Python client's variable names win; the ones this example read first
// still work.
func TestEnvOr(t *testing.T) {
	t.Setenv("DISCOVERY_TOKEN", "old")
	if got := envOr("", "PROXY_OPERATOR_TOKEN", "DISCOVERY_TOKEN"); got != "old" {
		t.Errorf("with only the old variable: %q, want old", got)
	}
	t.Setenv("PROXY_OPERATOR_TOKEN", "new")
	if got := envOr("", "PROXY_OPERATOR_TOKEN", "DISCOVERY_TOKEN"); got != "new" {
		t.Errorf("with both: %q, want new", got)
	}
	if got := envOr("def", "PROXY_OPERATOR_UNSET_X"); got != "def" {
		t.Errorf("with none: %q, want the default", got)
	}
}
