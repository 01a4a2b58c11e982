package crawleee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/devenv"
	"github.com/proxy-operator/proxy-operator/test/devenv/devenvtest"
	"github.com/proxy-operator/proxy-operator/test/logtail"
)

// chromium is Debian's browser; Crawlee's own download is never used.
const chromium = "/usr/bin/chromium"

// pagesPerSite are the pages the site's index links to, besides /limited.
const pagesPerSite = 10

// hit is one request the site answered.
type hit struct {
	at   time.Time
	path string
	via  string
	code int
}

// site is an origin on its own loopback address: an index linking to
// pagesPerSite pages and /limited, which answers 429 the first time it is
// asked (then 200, as a site whose limit was passed for a moment).
type site struct {
	url string
	mu  sync.Mutex
	log []hit
	// limited counts the requests for /limited.
	limited int
}

func newSite(t *testing.T, addr string) *site {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	s := &site{url: "http://" + ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusOK
		s.mu.Lock()
		if r.URL.Path == "/limited" {
			if s.limited++; s.limited == 1 {
				code = http.StatusTooManyRequests
			}
		}
		s.log = append(s.log, hit{at: time.Now(), path: r.URL.Path, via: r.Header.Get("Via"), code: code})
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(code)
		if r.URL.Path != "/" {
			fmt.Fprintf(w, "<html><body>%s</body></html>", r.URL.Path)
			return
		}
		var links strings.Builder
		for i := range pagesPerSite {
			fmt.Fprintf(&links, `<a href="/p%d">p%d</a> `, i, i)
		}
		fmt.Fprintf(w, `<html><body>%s<a href="/limited">limited</a></body></html>`, links.String())
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *site) hits() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hit(nil), s.log...)
}

// page is what the crawl saw of one navigation (testdata/crawl.mjs).
type page struct {
	URL     string `json:"url"`
	Retry   int    `json:"retry"`
	Status  int    `json:"status"`
	Via     string `json:"via"`
	Lease   string `json:"lease"`
	Session string `json:"session"`
	Failed  string `json:"failed"`
}

// crawl runs testdata/crawl.mjs from start through the gateway of env.
func crawl(t *testing.T, env *devenv.Env, start string) []page {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	modules := filepath.Join(root, "bin", "crawlee", "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "@crawlee", "playwright")); err != nil {
		t.Fatalf("Crawlee is not installed in bin/crawlee (make crawlee): %v", err)
	}
	// The script beside the installed modules, as node resolves imports
	// from a script's own directory.
	dir := t.TempDir()
	script, err := os.ReadFile("testdata/crawl.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crawl.mjs"), script, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pages.json")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "crawl.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GATEWAY="+strings.TrimPrefix(env.GatewayURL, "http://"), "TOKEN="+env.DiscoveryToken,
		"START="+start, "CHROMIUM="+chromium, "OUT="+out, "HOME="+dir, "CRAWLEE_STORAGE_DIR="+filepath.Join(dir, "storage"))
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the crawl: %v\n%s", err, logtail.Lines(string(output), 60))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the crawl wrote no pages: %v\n%s", err, logtail.Lines(string(output), 60))
	}
	var pages []page
	if err := json.Unmarshal(b, &pages); err != nil {
		t.Fatal(err)
	}
	return pages
}

// Each run crawls a fresh site (its own address, so no cooldown of an
// earlier run applies): every page is crawled, the one 429 is retried by
// Crawlee and answered, and no request reaches the site through the proxy
// that got the 429 afterwards (the cooldown window, 5 minutes, outlasts the
// test). Chromium's own background requests (accounts.google.com,
// update.googleapis.com) often begin a new session, whose lease was then
// granted for them: the gateway checks the lease for the site before the
// session's first request there.
func TestCrawleeRetriesNeverReturnToTheCooledProxy(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("Debian's chromium is required (make crawlee): %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is required (make crawlee): %v", err)
	}
	env := devenvtest.Start(t, devenv.Options{
		// Two replicas, as `make dev -operators 2` runs them: its stand-in
		// Service spreads a browser's connections over both (an install's
		// keeps one client on one replica), each with its own sessions.
		Ports: devenv.Ports{}, NodeName: "proxy-operator-crawlee-e2e", Operators: 2,
		PoolFirst: netip.MustParseAddr("127.0.14.2"), PoolLast: netip.MustParseAddr("127.0.14.60"),
		GCEPoolFirst: netip.MustParseAddr("127.0.14.100"), GCEPoolLast: netip.MustParseAddr("127.0.14.140"),
	})

	const runs = 3
	for i := range runs {
		s := newSite(t, fmt.Sprintf("127.0.15.%d", i+1))
		pages := crawl(t, env, s.url+"/")
		hits := s.hits()
		var limitedAt time.Time
		var cooled string
		for _, h := range hits {
			if h.code == http.StatusTooManyRequests {
				limitedAt, cooled = h.at, h.via
			}
		}
		if cooled == "" {
			t.Fatalf("run %d: the site never answered 429 through a proxy; it saw %d requests", i, len(hits))
		}
		for _, h := range hits {
			if h.at.After(limitedAt) && h.via == cooled {
				t.Errorf("run %d: %s reached the site through %q %s after that proxy's 429 for it", i, h.path, cooled, h.at.Sub(limitedAt).Round(time.Millisecond))
			}
		}
		ok, leases := map[string]bool{}, map[string]bool{}
		for _, p := range pages {
			if p.Failed != "" {
				t.Errorf("run %d: Crawlee gave up on %s: %s", i, p.URL, p.Failed)
			}
			if p.Status == http.StatusOK {
				ok[strings.TrimPrefix(p.URL, s.url)] = true
			}
			if p.Lease != "" {
				leases[p.Lease] = true
			}
		}
		if len(ok) != pagesPerSite+2 || !ok["/limited"] {
			t.Errorf("run %d: %d pages answered 200 (/limited among them: %v), want all %d", i, len(ok), ok["/limited"], pagesPerSite+2)
		}
		t.Logf("run %d: %d requests at the site, the 429 through %q, %d leases for the crawl's pages", i, len(hits), cooled, len(leases))
	}
}
