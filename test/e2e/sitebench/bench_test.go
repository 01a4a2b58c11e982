package sitebench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// The site and the crawl (docs/benchmarks.md, "Site politeness").
const (
	proxies = 6
	// rate is what the origin allows a second in all, halved at halveAt;
	// perProxy its bound on one proxy's requests in flight; latency its
	// answer time. Its tolerance is rate × latency = 20 requests at once.
	rate     = 50
	perProxy = 6
	latency  = 400 * time.Millisecond
	// workers crawl it at once: 4× its tolerance, as ten crawler pods would.
	workers = 80
	halveAt = 30 * time.Second
	runFor  = 90 * time.Second
	// warmup is left out of the first phase's figures.
	warmup = 5 * time.Second
	// backoff is what a worker waits after a 429, as crawlers do.
	backoff = time.Second
)

// squidAddrs is this package's loopback range for its Squids.
var squidAddrs = [2]string{"127.0.17.2", "127.0.17.40"}

const token = "site-bench-token"

// pages numbers every page fetched: each URL once, so that no Squid answers
// from its cache.
var pages atomic.Int64

// The SitePolicy of the policy run: the ceiling is what the crawl could use
// (the operator does not know the site's tolerance), the rest its defaults.
func benchPolicy(site string) sites.Policy {
	return sites.Policy{Name: "bench", Sites: []string{site}, MinConcurrency: 1, MaxConcurrency: workers,
		IncreaseInterval: sites.DefaultIncreaseInterval, DecreaseFactor: sites.DefaultDecreaseFactor}
}

// mode is how the workers crawl.
type mode struct {
	name string
	// policy: under a SitePolicy, the workers trusting the operator (no
	// throttle of their own); else each throttles on its own (per-process
	// AIMD on its delay, as Scrapy's AutoThrottle or Crawlee's pool do).
	policy bool
	// report: 429s are reported rate_limited (the operator cools that
	// proxy for the site, without a policy).
	report bool
}

var modes = []mode{
	{name: "baseline", report: true},
	{name: "frameworks-alone"},
	{name: "policy", policy: true, report: true},
}

// BenchmarkSitePolicy crawls the origin three ways: the baseline (no
// policy, each worker throttling on its own and reporting its 429s, which
// cool their proxies for the site), the frameworks alone (the same without
// reports: what per-process throttling does by itself), and under a
// SitePolicy. Every worker backs off a second after a 429.
func BenchmarkSitePolicy(b *testing.B) {
	r := startRig(b)
	for b.Loop() {
		res := map[string]result{}
		for _, m := range modes {
			res[m.name] = r.crawl(b, m)
			b.ReportMetric(res[m.name].goodputA, m.name+"-goodput-ratio")
			b.ReportMetric(res[m.name].limitedA*100, m.name+"-429-%")
			b.ReportMetric(res[m.name].limitedAll*100, m.name+"-429-incl-warmup-%")
			b.ReportMetric(res[m.name].goodputB, m.name+"-halved-goodput-ratio")
			b.ReportMetric(res[m.name].limitedB*100, m.name+"-halved-429-%")
			b.ReportMetric(res[m.name].recovery.Seconds(), m.name+"-recovery-s")
			b.Logf("%s: %s", m.name, res[m.name])
		}
		// The negative control: without the policy the site's targets are
		// missed (goodput ≥ 90% of the rate with 429s ≤ 2%), or the
		// benchmark cannot tell the policy's effect from the others.
		for _, name := range []string{"baseline", "frameworks-alone"} {
			if o := res[name]; o.goodputA >= 0.9 && o.limitedA <= 0.02 {
				b.Errorf("%s meets the policy's targets (goodput %.0f%%, 429s %.1f%%): the benchmark shows nothing", name, o.goodputA*100, o.limitedA*100)
			}
		}
	}
}

// result is one crawl's figures: the first phase (from warmup to halveAt)
// against rate, the last 30 s against rate/2, and how long after the
// halving the 429 share stayed under 2% in every 10 s window that served
// pages (runFor-halveAt: never).
type result struct {
	goodputA, limitedA, goodputB, limitedB float64
	// limitedAll is the 429 share of the first phase, warm-up included.
	limitedAll  float64
	recovery    time.Duration
	leaseErrors int
}

func (r result) String() string {
	return fmt.Sprintf("goodput %.0f%% of the rate, 429s %.1f%% (%.1f%% with the warm-up); after the halving, last 30 s: goodput %.0f%%, 429s %.1f%%; under 2%% in every 10 s window from %v after the halving (lease errors %d)",
		r.goodputA*100, r.limitedA*100, r.limitedAll*100, r.goodputB*100, r.limitedB*100, r.recovery, r.leaseErrors)
}

type rig struct {
	store *lease.Store
	api   string
	// crawls counts the crawls: each has a site of its own (127.0.18.n),
	// so that no cooldown of one reaches the next.
	crawls int
}

func startRig(b *testing.B) *rig {
	b.Helper()
	opts := leasing.DefaultOptions()
	opts.MaxLeasesPerProxy = workers
	squids := make([]squid, proxies)
	for i := range squids {
		squids[i].name = fmt.Sprintf("sitebench-%d", i)
	}
	store, api := startFleet(b, squidAddrs, opts, squids)
	return &rig{store: store, api: api}
}

// crawl runs the workers against a fresh origin for runFor.
func (r *rig) crawl(b *testing.B, m mode) result {
	b.Helper()
	o := newOrigin(rate, perProxy, latency)
	r.crawls++
	site := fmt.Sprintf("127.0.18.%d", r.crawls)
	pageURL, stop := serveSite(b, site, o)
	defer stop()
	if m.policy {
		r.store.SetSitePolicies([]sites.Policy{benchPolicy(site)})
		defer r.store.SetSitePolicies(nil)
	}
	c, err := client.New(r.api, token)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	o.start = time.Now()
	halve := time.AfterFunc(halveAt, func() { o.setRate(rate / 2) })
	defer halve.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	leaseErrors := 0
	for i := range workers {
		// Ten crawler pods of one tenant, each its own flow.
		flow := fmt.Sprintf("pod-%d", i%10)
		wg.Go(func() {
			n := work(ctx, c, flow, site, pageURL, !m.policy, m.report)
			mu.Lock()
			leaseErrors += n
			mu.Unlock()
		})
	}
	wg.Wait()
	res := result{leaseErrors: leaseErrors}
	a := o.span(int(warmup/time.Second), int(halveAt/time.Second))
	res.goodputA = float64(a.ok) / ((halveAt - warmup).Seconds() * rate)
	res.limitedA = a.share()
	res.limitedAll = o.span(0, int(halveAt/time.Second)).share()
	end := int(runFor / time.Second)
	last := o.span(end-30, end)
	res.goodputB = float64(last.ok) / (30 * rate / 2)
	res.limitedB = last.share()
	res.recovery = runFor - halveAt
	for s := end - 10; s >= int(halveAt/time.Second); s-- {
		// A window that served no page has not recovered, whatever its
		// share (a crawl every proxy cools for answers nothing at all).
		if w := o.span(s, s+10); w.share() >= 0.02 || w.ok == 0 {
			break
		}
		res.recovery = time.Duration(s)*time.Second - halveAt
	}
	return res
}

// work is one crawler worker until ctx ends: lease, fetch, report a 429,
// release. With selfThrottle it also paces itself as the frameworks do: its
// delay doubles on a 429 and shrinks on a 200; with report it reports each
// 429 rate_limited. It returns the lease requests that failed.
func work(ctx context.Context, c *client.Client, flow, site, pageURL string, selfThrottle, report bool) int {
	var delay time.Duration
	failed := 0
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	for ctx.Err() == nil {
		if selfThrottle && delay > 0 {
			sleep(delay)
		}
		l, err := c.Acquire(ctx, wire.AcquireRequest{Target: site, Flow: flow, TTLSeconds: 60, WaitSeconds: 10})
		if err != nil {
			if ctx.Err() == nil {
				failed++
				sleep(100 * time.Millisecond)
			}
			continue
		}
		status, err := fetch(l, pageURL)
		limited := status == http.StatusTooManyRequests
		result := ""
		if limited && report {
			result = wire.ResultRateLimited
		}
		endLease(c, l, result, site)
		switch {
		case limited:
			delay = min(max(2*delay, 100*time.Millisecond), 10*time.Second)
			sleep(backoff)
		case err == nil:
			delay = max(delay-50*time.Millisecond, 0)
		}
	}
	return failed
}
