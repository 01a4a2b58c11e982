package pythone2e

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
	"syscall"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	leasingclientset "github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/devenv"
	"github.com/proxy-operator/proxy-operator/test/devenv/devenvtest"
	"github.com/proxy-operator/proxy-operator/test/framework"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

// site is an origin on its own loopback address (its own domain for the
// middleware) that records which proxy each request came through.
type site struct {
	url string
	srv *http.Server

	mu     sync.Mutex
	byVia  map[string]int
	status map[int]int
}

// answer decides a site's reply to the n-th request (from 1) through proxy via.
type answer func(via string, n int) (code int, body string)

func ok200(string, int) (int, string) { return http.StatusOK, "ok" }

// rateLimitAfter answers 429 to a proxy after limit requests through it.
func rateLimitAfter(limit int) answer {
	return func(_ string, n int) (int, string) {
		if n > limit {
			return http.StatusTooManyRequests, "slow down"
		}
		return http.StatusOK, "ok"
	}
}

// rateLimitEvery answers 429 to every n-th request the site gets, whatever
// the proxy.
func rateLimitEvery(n int) answer {
	var mu sync.Mutex
	count := 0
	return func(string, int) (int, string) {
		mu.Lock()
		count++
		limited := count%n == 0
		mu.Unlock()
		if limited {
			return http.StatusTooManyRequests, "slow down"
		}
		return http.StatusOK, "ok"
	}
}

// banFirstProxy answers ban to every request through the first proxy it sees.
func banFirstProxy(ban answer) answer {
	var mu sync.Mutex
	first := ""
	return func(via string, n int) (int, string) {
		mu.Lock()
		if first == "" {
			first = via
		}
		banned := via == first
		mu.Unlock()
		if banned {
			return ban(via, n)
		}
		return http.StatusOK, "ok"
	}
}

// newSite serves on addr, answering with reply after delay.
func newSite(t *testing.T, addr string, delay time.Duration, reply answer) *site {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	s := &site{url: "http://" + ln.Addr().String(), byVia: map[string]int{}, status: map[int]int{}}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		via := r.Header.Get("Via")
		s.mu.Lock()
		s.byVia[via]++
		n := s.byVia[via]
		s.mu.Unlock()
		code, body := reply(via, n)
		s.mu.Lock()
		s.status[code]++
		s.mu.Unlock()
		w.WriteHeader(code)
		fmt.Fprintf(w, "site %s via %s: %s\n", addr, via, body)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// served counts the requests the site answered.
func (s *site) served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.status {
		n += c
	}
	return n
}

// vias are the proxies (Via values) requests came through.
func (s *site) vias() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for v := range s.byVia {
		out = append(out, v)
	}
	return out
}

type crawlResult struct {
	// Log is the crawl's output.
	Log string `json:"-"`
	// Reactor is the class of the reactor the crawl ran on.
	Reactor string         `json:"reactor"`
	Stats   map[string]any `json:"stats"`
	Seen    []struct {
		URL    string `json:"url"`
		Status int    `json:"status"`
		Proxy  string `json:"proxy"`
	} `json:"seen"`
}

func (r crawlResult) stat(k string) float64 {
	v, _ := r.Stats["proxy_operator/"+k].(float64)
	return v
}

// crawl runs clients/python/tests/e2e_crawl.py with the middleware pointed at env.
func crawl(t *testing.T, env *devenv.Env, urls []string, settings map[string]any) crawlResult {
	t.Helper()
	res, err := runCrawl(t.Context(), framework.ScrapyPython(t), t.TempDir(), env, urls, settings, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("crawl stats: %v", res.Stats)
	return res
}

// runCrawl is crawl for any goroutine: dir is its scratch directory; with a
// gap the URLs are fetched one at a time, gap seconds apart.
func runCrawl(ctx context.Context, py, dir string, env *devenv.Env, urls []string, settings map[string]any, gap *float64) (crawlResult, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return crawlResult{}, err
	}
	settings["PROXY_OPERATOR_URL"] = env.DiscoveryURL
	settings["PROXY_OPERATOR_CA_FILE"] = env.CAPath
	cfg, _ := json.Marshal(map[string]any{"urls": urls, "settings": settings, "gap": gap})
	in, out := filepath.Join(dir, "crawl.json"), filepath.Join(dir, "result.json")
	if err := os.WriteFile(in, cfg, 0o600); err != nil {
		return crawlResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join(root, "clients/python/tests/e2e_crawl.py"), in, out)
	// The token goes by environment, as a crawler's would; the client from
	// this checkout.
	cmd.Env = append(os.Environ(), "PROXY_OPERATOR_TOKEN="+env.DiscoveryToken, "PYTHONPATH="+filepath.Join(root, "clients/python"))
	output, err := cmd.CombinedOutput()
	if err != nil {
		return crawlResult{}, fmt.Errorf("crawl: %v\n%s", err, logtail.Lines(string(output), 60))
	}
	var res crawlResult
	b, err := os.ReadFile(out)
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	if err != nil {
		return crawlResult{}, fmt.Errorf("reading the crawl's result: %v\n%s", err, logtail.Lines(string(output), 60))
	}
	res.Log = string(output)
	return res, nil
}

// activeLeases sums the fleet's live leases, as the HTTP API reports them.
func activeLeases(t *testing.T, env *devenv.Env) int {
	t.Helper()
	c, err := env.LeaseClient("")
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListProxies(t.Context(), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range list {
		n += p.ActiveLeases
	}
	return n
}

func TestScrapy(t *testing.T) {
	py := framework.ScrapyPython(t)
	env := devenvtest.Start(t, devenv.Options{
		// Two replicas, as installed: the last subtest hands over between them.
		Ports: devenv.Ports{}, NodeName: "proxy-operator-python-e2e", Operators: 2,
		PoolFirst: netip.MustParseAddr("127.0.11.2"), PoolLast: netip.MustParseAddr("127.0.11.60"),
		GCEPoolFirst: netip.MustParseAddr("127.0.11.100"), GCEPoolLast: netip.MustParseAddr("127.0.11.140"),
	})

	t.Run("pip install clients/python works offline", func(t *testing.T) {
		root, _ := controlplane.RepoRoot()
		// From a copy: an in-tree build leaves build/ and *.egg-info behind.
		src, target := filepath.Join(t.TempDir(), "python"), t.TempDir()
		if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "clients/python"))); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", "--quiet",
			"--target", target, src).CombinedOutput()
		if err != nil {
			t.Fatalf("pip install: %v\n%s", err, out)
		}
		check := exec.Command(py, "-c", "import proxy_operator, proxy_operator.middleware; print(proxy_operator.__file__)")
		check.Dir, check.Env = target, append(os.Environ(), "PYTHONPATH="+target)
		out, err = check.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), target) {
			t.Fatalf("importing the installed package: %v\n%s", err, out)
		}
	})

	t.Run("the example spider runs as documented", func(t *testing.T) {
		root, _ := controlplane.RepoRoot()
		out := filepath.Join(t.TempDir(), "pages.json")
		cmd := exec.Command(py, "-m", "scrapy", "runspider", filepath.Join(root, "examples/scrapy-crawler/spider.py"),
			"-a", "start="+env.OriginURL, "-a", "pages=5", "-o", out)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients/python"),
			"PROXY_OPERATOR_URL="+env.DiscoveryURL, "PROXY_OPERATOR_TOKEN="+env.DiscoveryToken, "PROXY_OPERATOR_CA_FILE="+env.CAPath)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scrapy runspider: %v\n%s", err, logtail.Lines(string(b), 40))
		}
		var items []struct {
			Status int    `json:"status"`
			Proxy  string `json:"proxy"`
			Body   string `json:"body"`
		}
		b, err := os.ReadFile(out)
		if err == nil {
			err = json.Unmarshal(b, &items)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 5 {
			t.Fatalf("%d items, want 5", len(items))
		}
		for _, it := range items {
			// Through a leased squid: the origin echoes squid's Via.
			if it.Status != http.StatusOK || !strings.HasPrefix(it.Proxy, "http://127.0.11.") || !strings.Contains(it.Body, "squid") {
				t.Errorf("item %+v: want 200 through a leased proxy of the fleet", it)
			}
		}
		if n := activeLeases(t, env); n != 0 {
			t.Errorf("%d leases live after the spider closed, want 0", n)
		}
	})

	t.Run("429 moves one site to another proxy, the other keeps its lease", func(t *testing.T) {
		const perProxy, requests = 3, 8
		limited := newSite(t, "127.0.10.1", 0, rateLimitAfter(perProxy))
		steady := newSite(t, "127.0.10.2", 0, ok200)
		var urls []string
		for i := range requests {
			urls = append(urls, fmt.Sprintf("%s/a/%d", limited.url, i), fmt.Sprintf("%s/b/%d", steady.url, i))
		}
		res := crawl(t, env, urls, map[string]any{"PROXY_OPERATOR_TTL": 60})
		ok := map[string]int{}
		for _, s := range res.Seen {
			if s.Status == http.StatusOK {
				ok[s.URL[:len(limited.url)]]++
			}
		}
		if ok[limited.url] != requests || ok[steady.url] != requests {
			t.Errorf("200s: %d from the rate-limiting site, %d from the other; want %d each", ok[limited.url], ok[steady.url], requests)
		}
		if v := limited.vias(); len(v) < 2 {
			t.Errorf("the rate-limiting site saw proxies %q, want at least 2 (moved after 429)", v)
		}
		if v := steady.vias(); len(v) != 1 {
			t.Errorf("the steady site saw proxies %q, want 1 (kept its lease)", v)
		}
		// One report per lease dropped (the first proxy, and any other that hit
		// the limit), every request answered 429 retried.
		if reps := res.stat("reports/rate_limited"); reps < 1 || reps != res.stat("leases_acquired")-2 || res.stat("retries") < 1 {
			t.Errorf("stats %v: want rate_limited reports and retries", res.Stats)
		}
		if acq, rel := res.stat("leases_acquired"), res.stat("leases_released"); acq < 3 || acq != rel {
			t.Errorf("leases acquired %v, released %v: want at least 3, all released", acq, rel)
		}
		if n := activeLeases(t, env); n != 0 {
			t.Errorf("%d leases live after the spider closed, want 0", n)
		}
	})

	t.Run("a site every proxy cools for does not stall the crawl of another", func(t *testing.T) {
		const pages = 40
		limited := newSite(t, "127.0.10.6", 0, rateLimitEvery(4))
		steady := newSite(t, "127.0.10.7", 0, ok200)
		var urls []string
		for i := range pages {
			urls = append(urls, fmt.Sprintf("%s/a/%d", limited.url, i), fmt.Sprintf("%s/b/%d", steady.url, i))
		}
		began := time.Now()
		res := crawl(t, env, urls, map[string]any{"PROXY_OPERATOR_WAIT": 60, "PROXY_OPERATOR_TTL": 60})
		took := time.Since(began)
		ok := map[string]int{}
		for _, s := range res.Seen {
			if s.Status == http.StatusOK {
				ok[s.URL[:len(limited.url)]]++
			}
		}
		t.Logf("crawl took %s: %d of %d pages of the steady site, %d of the rate-limiting one (%v dropped while it cooled on every proxy)",
			took.Round(100*time.Millisecond), ok[steady.url], pages, ok[limited.url], res.stat("site_cooling"))
		if ok[steady.url] != pages {
			t.Errorf("%d pages of the steady site answered 200, want all %d", ok[steady.url], pages)
		}
		// Before per-class queues the same crawl took minutes: the flow's
		// waiting request for the cooling site held back the other site's.
		// A wait of PROXY_OPERATOR_WAIT (60 s) anywhere would show here.
		if took > 50*time.Second {
			t.Errorf("the crawl took %s, want well under the 60 s lease wait", took)
		}
		if n := activeLeases(t, env); n != 0 {
			t.Errorf("%d leases live after the spider closed, want 0", n)
		}
		if acq, rel := res.stat("leases_acquired"), res.stat("leases_released"); acq != rel {
			t.Errorf("leases acquired %v, released %v: want all released", acq, rel)
		}
	})

	t.Run("bans by status and by predicate are reported and moved", func(t *testing.T) {
		const requests = 4
		byCode := newSite(t, "127.0.10.4", 0, banFirstProxy(func(string, int) (int, string) { return http.StatusForbidden, "go away" }))
		byBody := newSite(t, "127.0.10.5", 0, banFirstProxy(func(string, int) (int, string) { return http.StatusOK, "captcha" }))
		var urls []string
		for i := range requests {
			urls = append(urls, fmt.Sprintf("%s/%d", byCode.url, i), fmt.Sprintf("%s/%d", byBody.url, i))
		}
		res := crawl(t, env, urls, map[string]any{
			"PROXY_OPERATOR_BAN_CODES":     []int{403},
			"PROXY_OPERATOR_BAN_PREDICATE": "e2e_crawl.is_captcha",
		})
		good := 0
		for _, s := range res.Seen {
			if s.Status == http.StatusOK {
				good++
			}
		}
		// Each banned page was retried elsewhere: none ends as a ban (a
		// captcha page is a 200 the spider would otherwise keep).
		if good != 2*requests || byBody.status[http.StatusOK] < requests+1 {
			t.Errorf("%d pages answered 200 (want %d); site statuses %v / %v", good, 2*requests, byCode.status, byBody.status)
		}
		if n := res.stat("reports/banned"); n != 2 {
			t.Errorf("%v banned reports, want 2 (one lease per site)", n)
		}
		if len(byCode.vias()) < 2 || len(byBody.vias()) < 2 {
			t.Errorf("proxies seen: %q and %q, want each site moved off its first", byCode.vias(), byBody.vias())
		}
		if n := activeLeases(t, env); n != 0 {
			t.Errorf("%d leases live after the spider closed, want 0", n)
		}
	})

	t.Run("a lease is renewed while its domain is crawled past its TTL", func(t *testing.T) {
		const ttl = 6
		slow := newSite(t, "127.0.10.3", 700*time.Millisecond, ok200)
		var urls []string
		for i := range 20 { // one at a time: ~14 s, past the 6 s TTL and Squid's 10 s trust in a check
			urls = append(urls, fmt.Sprintf("%s/%d", slow.url, i))
		}
		res := crawl(t, env, urls, map[string]any{"PROXY_OPERATOR_TTL": ttl, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
		if n := res.stat("leases_renewed"); n < 1 {
			t.Errorf("%v renewals in a crawl longer than the %ds TTL, want at least 1", n, ttl)
		}
		// Scrapy gave every request its proxy URL (with the first
		// credentials) when it took it; the ones sent after those expired
		// were refused (407) and sent again with the renewal's.
		ok := 0
		for _, s := range res.Seen {
			if s.Status == http.StatusOK {
				ok++
			}
		}
		if ok != len(urls) || res.stat("proxy_auth_retries") < 1 {
			t.Errorf("%d of %d answered 200, %v sent again after a 407: want all, and some (stats %v)", ok, len(urls), res.stat("proxy_auth_retries"), res.Stats)
		}
		if acq := res.stat("leases_acquired"); acq != 1 || len(slow.vias()) != 1 {
			t.Errorf("%v leases, proxies %q: want the one lease kept throughout", acq, slow.vias())
		}
		if n := activeLeases(t, env); n != 0 {
			t.Errorf("%d leases live after the spider closed, want 0", n)
		}
	})

	t.Run("a renewal that says the proxy drains moves the domain to another proxy", func(t *testing.T) {
		const ttl = 6
		slow := newSite(t, "127.0.10.40", 700*time.Millisecond, ok200)
		var urls []string
		for i := range 14 { // one at a time: ~10 s, past two renewals
			urls = append(urls, fmt.Sprintf("%s/%d", slow.url, i))
		}
		done := make(chan crawlResult, 1)
		go func() {
			// One request at a time through the middleware too (per domain
			// alone, Scrapy hands it every request at once).
			// The two VMs of the fleet: no ProxyPool owns them (a pool would
			// take its own draining annotation back).
			done <- crawl(t, env, urls, map[string]any{"PROXY_OPERATOR_TTL": ttl, "CONCURRENT_REQUESTS": 1,
				"PROXY_OPERATOR_SELECTOR": map[string]string{"tier": "vm"}})
		}()
		// Once the domain holds its lease (a ProxyLease too, with the domain
		// as its target), its ProxyPool would be removing that proxy: the
		// annotation the pool sets.
		leasingClient, err := leasingclientset.NewForConfig(env.ControlPlane.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		var leasedNS, leasedName string
		for deadline := time.Now().Add(30 * time.Second); leasedName == ""; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the crawl never held a lease")
			}
			list, err := leasingClient.LeasingV1alpha1().ProxyLeases("").List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, pl := range list.Items {
				if pl.Spec.Target == "127.0.10.40" && pl.Status.Proxy != nil {
					leasedNS, leasedName = pl.Namespace, pl.Status.Proxy.Name
				}
			}
		}
		t.Logf("the domain's lease is on %s/%s: marking it draining", leasedNS, leasedName)
		kube := kubeClient(t, env)
		setDraining(t, kube, leasedNS, leasedName, time.Now().UTC().Format(time.RFC3339))
		defer setDraining(t, kube, leasedNS, leasedName, "")
		res := <-done
		if n := res.stat("leases_left_draining"); n != 1 {
			t.Errorf("%v leases left for draining, want 1 (stats %v)", n, res.Stats)
		}
		if acq, v := res.stat("leases_acquired"), slow.vias(); acq != 2 || len(v) != 2 {
			t.Errorf("%v leases, proxies %q: want the domain moved once, to a second proxy", acq, v)
		}
		ok := 0
		for _, s := range res.Seen {
			if s.Status == http.StatusOK {
				ok++
			}
		}
		if ok != len(urls) {
			t.Errorf("%d of %d requests answered 200, want all", ok, len(urls))
		}
		if n := activeLeases(t, env); n != 0 {
			t.Errorf("%d leases live after the spider closed, want 0", n)
		}
	})

	t.Run("more domains than proxies: requests wait, none fails", func(t *testing.T) {
		const domains, perDomain = 8, 4 // 8 domains on a fleet of 4 proxies
		var urls []string
		for d := range domains {
			s := newSite(t, fmt.Sprintf("127.0.10.%d", 10+d), 150*time.Millisecond, ok200)
			for i := range perDomain {
				urls = append(urls, fmt.Sprintf("%s/%d", s.url, i))
			}
		}
		res := crawl(t, env, urls, map[string]any{
			"PROXY_OPERATOR_WAIT": 10, "PROXY_OPERATOR_IDLE_RELEASE": 0.2, "CONCURRENT_REQUESTS": 32,
		})
		ok := 0
		for _, s := range res.Seen {
			if s.Status == http.StatusOK {
				ok++
			}
		}
		if ok != domains*perDomain || res.stat("gave_up") != 0 {
			t.Errorf("%d of %d requests answered 200, %v gave up; want all, none", ok, domains*perDomain, res.stat("gave_up"))
		}
		// Half the domains found every proxy leased: they waited for one.
		if w := res.stat("lease_wait_seconds_max"); w < 0.1 {
			t.Errorf("longest lease wait %vs: with %d domains on 4 proxies some must have waited", w, domains)
		}
		if acq := res.stat("leases_acquired"); acq < domains {
			t.Errorf("%v leases acquired, want one per domain at least (%d)", acq, domains)
		}
		if n := activeLeases(t, env); n != 0 {
			t.Errorf("%d leases live after the spider closed, want 0", n)
		}
	})

	// Scrapy's default reactor since 2.13: the middleware awaits its leases
	// as asyncio futures there (it awaited Twisted Deferreds, which an
	// asyncio task cannot). More domains than proxies, so requests wait.
	t.Run("the middleware runs under the asyncio reactor", func(t *testing.T) {
		const domains, perDomain = 6, 3
		var urls []string
		for d := range domains {
			s := newSite(t, fmt.Sprintf("127.0.10.%d", 30+d), 100*time.Millisecond, ok200)
			for i := range perDomain {
				urls = append(urls, fmt.Sprintf("%s/%d", s.url, i))
			}
		}
		res := crawl(t, env, urls, map[string]any{
			"TWISTED_REACTOR":     "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
			"PROXY_OPERATOR_WAIT": 10, "PROXY_OPERATOR_IDLE_RELEASE": 0.2, "CONCURRENT_REQUESTS": 16,
		})
		if res.Reactor != "AsyncioSelectorReactor" {
			t.Fatalf("the crawl ran on %q, want AsyncioSelectorReactor", res.Reactor)
		}
		ok := 0
		for _, s := range res.Seen {
			if s.Status == http.StatusOK {
				ok++
			}
		}
		if ok != domains*perDomain || res.stat("gave_up") != 0 {
			t.Errorf("%d of %d requests answered 200, %v gave up; want all, none (stats %v)", ok, domains*perDomain, res.stat("gave_up"), res.Stats)
		}
		if n := activeLeases(t, env); n != 0 {
			t.Errorf("%d leases live after the spider closed, want 0", n)
		}
	})

	t.Run("two crawler processes share one site's SitePolicy budget", func(t *testing.T) {
		sharedSiteBudget(t, py, env)
	})

	t.Run("a ladder climbs to premium for a site that bans the standard tier", func(t *testing.T) {
		ladderClimbs(t, py, env)
	})

	// Last, since it restarts the leader.
	t.Run("a planned leader handover drops no request", func(t *testing.T) {
		plannedHandover(t, py, env)
	})
}

// plannedHandover: a crawl that leases and releases for every page (half a
// second apart) runs while the leader is sent SIGTERM, as a rolling update
// or a drain does. Its lease calls meet the standby's 503 not_leader and
// connections refused during the handover; the middleware retries them and
// every page is fetched.
func plannedHandover(t *testing.T, py string, env *devenv.Env) {
	if len(env.Operators) != 2 {
		t.Fatalf("%d operators, want 2", len(env.Operators))
	}
	leader := -1
	for i, o := range env.Operators {
		if o.Serving() {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no operator is ready")
	}
	const pages = 30
	s := newSite(t, "127.0.10.60", 0, ok200)
	var urls []string
	for i := range pages {
		urls = append(urls, fmt.Sprintf("%s/%d", s.url, i))
	}
	gap := 0.4
	type outcome struct {
		res crawlResult
		err error
	}
	done := make(chan outcome, 1)
	dir := t.TempDir()
	go func() {
		res, err := runCrawl(context.Background(), py, dir, env, urls, map[string]any{
			"PROXY_OPERATOR_TTL": 60, "PROXY_OPERATOR_IDLE_RELEASE": 0.1,
		}, &gap)
		done <- outcome{res, err}
	}()
	// SIGTERM once the crawl is under way.
	deadline := time.Now().Add(2 * time.Minute)
	for s.served() < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if s.served() < 3 {
		t.Fatal("the crawl fetched no 3 pages in 2 minutes")
	}
	pid := env.Operators[leader].PID()
	before := s.served()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	// The SIGTERM'ed process exits, then a replica serves again: the other
	// one, or the old one restarted (it may win the election again).
	var servedAgain time.Duration
	atTakeover := 0
	for deadline := sent.Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(pid, 0) == nil {
			continue
		}
		if env.Operators[0].Serving() || env.Operators[1].Serving() {
			servedAgain, atTakeover = time.Since(sent), s.served()
			break
		}
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	res := o.res
	t.Logf("SIGTERM of the leader after %d pages; a replica served again %s later; crawl stats: %v", before, servedAgain.Round(100*time.Millisecond), res.Stats)
	if servedAgain == 0 {
		t.Fatal("the leader did not exit, or no replica served within a minute of its SIGTERM")
	}
	// Pages were still to come when the new leader took over: the crawl's
	// lease calls spanned the whole handover.
	if atTakeover >= pages {
		t.Fatalf("the crawl ended before the handover did (%d pages before SIGTERM, all %d by the takeover)", before, pages)
	}
	ok := 0
	for _, p := range res.Seen {
		if p.Status == http.StatusOK {
			ok++
		}
	}
	if ok != pages || res.stat("gave_up") != 0 || res.stat("errors") != 0 {
		t.Errorf("%d of %d pages fetched, %v gave up, %v errors; want every page, none, none\n%s", ok, pages, res.stat("gave_up"), res.stat("errors"), logtail.Lines(res.Log, 40))
	}
	if n := activeLeases(t, env); n != 0 {
		t.Errorf("%d leases live after the spider closed, want 0", n)
	}
}

// setDraining sets (value "") or removes the draining annotation of a Proxy,
// as a ProxyPool does when it removes one.
func setDraining(t *testing.T, kube ctrlclient.Client, ns, name, since string) {
	t.Helper()
	var p crawlv1alpha1.Proxy
	if err := kube.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	orig := p.DeepCopy()
	if since == "" {
		delete(p.Annotations, crawlv1alpha1.DrainingAnnotation)
	} else {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[crawlv1alpha1.DrainingAnnotation] = since
	}
	if err := kube.Patch(context.Background(), &p, ctrlclient.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// sharedSiteBudget: two Scrapy processes crawl one site, each wanting three
// leases for it (PROXY_OPERATOR_LEASES_PER_DOMAIN). Under a SitePolicy of
// two, the fleet never holds more than two leases for the site at once, the
// middleware counts the refusals that named the policy, and every page is
// fetched; without it (the negative control) the two hold more.
func sharedSiteBudget(t *testing.T, py string, env *devenv.Env) {
	kube := kubeClient(t, env)
	const host = "127.0.10.50"
	site := newSite(t, host, 250*time.Millisecond, ok200)
	run := func(t *testing.T) (maxLeases int, results []crawlResult) {
		t.Helper()
		var urls []string
		// Long enough for the two crawls to overlap: 48 pages, 4 at once
		// per lease, 250 ms each.
		for i := range 48 {
			urls = append(urls, fmt.Sprintf("%s/%d", site.url, i))
		}
		settings := func() map[string]any {
			return map[string]any{"PROXY_OPERATOR_LEASES_PER_DOMAIN": 3, "PROXY_OPERATOR_WAIT": 10, "PROXY_OPERATOR_IDLE_RELEASE": 0.5,
				"CONCURRENT_REQUESTS_PER_DOMAIN": 4}
		}
		type out struct {
			res crawlResult
			err error
		}
		done := make(chan out, 2)
		for i := range 2 {
			dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			go func() {
				res, err := runCrawl(t.Context(), py, dir, env, urls, settings(), nil)
				done <- out{res, err}
			}()
		}
		for finished := 0; finished < 2; {
			select {
			case o := <-done:
				if o.err != nil {
					t.Fatal(o.err)
				}
				results = append(results, o.res)
				finished++
			case <-time.After(50 * time.Millisecond):
				maxLeases = max(maxLeases, activeLeases(t, env))
			}
		}
		for _, res := range results {
			ok := 0
			for _, s := range res.Seen {
				if s.Status == http.StatusOK {
					ok++
				}
			}
			if ok != len(urls) || res.stat("gave_up") != 0 {
				t.Errorf("a crawl fetched %d of %d pages, %v gave up", ok, len(urls), res.stat("gave_up"))
			}
		}
		return maxLeases, results
	}

	sp := &crawlv1alpha1.SitePolicy{ObjectMeta: metav1.ObjectMeta{Name: "python-e2e-shared-site"},
		Spec: crawlv1alpha1.SitePolicySpec{Sites: []string{host}, MaxConcurrency: 2}}
	if err := kube.Create(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := kube.Get(t.Context(), ctrlclient.ObjectKeyFromObject(sp), sp); err != nil {
			t.Fatal(err)
		}
		if c := apimeta.FindStatusCondition(sp.Status.Conditions, crawlv1alpha1.ConditionApplied); c != nil && c.Status == metav1.ConditionTrue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SitePolicy was not applied within 30 s: %+v", sp.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	maxLeases, results := run(t)
	refused := 0.0
	for _, res := range results {
		refused += res.stat("site_budget")
	}
	t.Logf("under the policy: at most %d leases at once, %v refusals naming it", maxLeases, refused)
	if maxLeases > 2 || maxLeases == 0 {
		t.Errorf("the two crawls held up to %d leases at once under a SitePolicy of 2", maxLeases)
	}
	if refused == 0 {
		t.Error("no refusal named the SitePolicy: the crawls never wanted more than its budget")
	}

	if err := kube.Delete(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	// The deletion reaches the store through the informer: the negative
	// control waits until more than two leases are granted.
	var without int
	for range 3 {
		if without, _ = run(t); without > 2 {
			break
		}
	}
	t.Logf("without the policy: up to %d leases at once", without)
	if without <= 2 {
		t.Errorf("without the SitePolicy the crawls held at most %d leases at once: the check above cannot tell", without)
	}
}

// ladderClimbs: a site answers 403 to every request through the first
// proxy it sees. A crawl with the ladder standard, premium (the fleet has
// one standard proxy) reports the 403 banned, and its next lease for the
// site climbs to premium: every page is fetched, the middleware counts the
// climb. The negative control, the standard tier alone, cannot fetch them.
func ladderClimbs(t *testing.T, py string, env *devenv.Env) {
	forbidden := func(string, int) (int, string) { return http.StatusForbidden, "go away" }
	urls := func(s *site) []string {
		var out []string
		for i := range 6 {
			out = append(out, fmt.Sprintf("%s/%d", s.url, i))
		}
		return out
	}
	oks := func(res crawlResult) int {
		n := 0
		for _, s := range res.Seen {
			if s.Status == http.StatusOK {
				n++
			}
		}
		return n
	}
	laddered := newSite(t, "127.0.10.60", 0, banFirstProxy(forbidden))
	res := crawl(t, env, urls(laddered), map[string]any{
		"PROXY_OPERATOR_SELECTORS": []map[string]string{{"tier": "standard"}, {"tier": "premium"}},
		"PROXY_OPERATOR_WAIT":      5, "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
	})
	if n := oks(res); n != 6 || res.stat("leases_climbed") < 1 || res.stat("reports/banned") < 1 {
		t.Errorf("with the ladder: %d of 6 pages, %v leases climbed, %v banned reports; want 6, at least 1, at least 1 (stats %v)\n%s",
			n, res.stat("leases_climbed"), res.stat("reports/banned"), res.Stats, logtail.Lines(res.Log, 30))
	}
	if vias := laddered.vias(); len(vias) != 2 {
		t.Errorf("the site saw proxies %q, want the banned standard one and the premium one", vias)
	}
	if n := activeLeases(t, env); n != 0 {
		t.Errorf("%d leases live after the spider closed, want 0", n)
	}

	alone := newSite(t, "127.0.10.61", 0, banFirstProxy(forbidden))
	res = crawl(t, env, urls(alone), map[string]any{
		"PROXY_OPERATOR_SELECTOR": map[string]string{"tier": "standard"},
		"PROXY_OPERATOR_WAIT":     1, "PROXY_OPERATOR_LEASE_ATTEMPTS": 2, "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
	})
	if n := oks(res); n != 0 || res.stat("leases_climbed") != 0 {
		t.Errorf("the standard tier alone fetched %d pages, climbed %v: the ladder's check cannot tell", n, res.stat("leases_climbed"))
	}
}

// kubeClient is a client of env's control plane for the crawl API's types.
func kubeClient(t *testing.T, env *devenv.Env) ctrlclient.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := crawlv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kube, err := ctrlclient.New(env.ControlPlane.RESTConfig(), ctrlclient.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return kube
}
