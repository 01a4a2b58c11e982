package sitebench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
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

// The ladder's crawl (docs/benchmarks.md, "The ladder of proxy tiers"): a
// site that refuses (403) every proxy of the cheap tier for blockFor, then
// none; workers crawl it with the ladder cheap, premium under a SitePolicy
// bounding the premium tier to premiumBudget leases.
const (
	cheapProxies, premiumProxies = 4, 2
	ladderWorkers                = 16
	premiumBudget                = 3
	// cooldown is the store's cooldown window: a banned (proxy, site)
	// pair is skipped this long.
	cooldown  = 10 * time.Second
	blockFor  = 25 * time.Second
	ladderRun = 50 * time.Second
	// ladderPage is the site's answer time: long enough that the crawl
	// wants more premium leases at once than the tier's budget.
	ladderPage = 500 * time.Millisecond
)

// ladderSquidAddrs and the sites (127.0.20.n) are this benchmark's own.
var ladderSquidAddrs = [2]string{"127.0.19.2", "127.0.19.40"}

var ladderSelectors = []map[string]string{{"tier": "cheap"}, {"tier": "premium"}}

// BenchmarkLadder crawls a site that blocks the cheap tier three times:
// with the ladder (cheap, then premium) under a SitePolicy bounding the
// premium tier, and two negative controls — the cheap tier alone, and the
// ladder without the tier's budget. With the ladder the site's leases must
// move to premium within one cooldown window, never hold more than
// premiumBudget premium leases at once, and come back to the cheap tier
// within one cooldown window of the block's end; the cheap tier alone must
// serve nothing while blocked, and without the budget the crawl must take
// more premium leases than it (or the bound was never put to the test).
func BenchmarkLadder(b *testing.B) {
	r := startLadderRig(b)
	for b.Loop() {
		lad := r.crawl(b, ladderSelectors, []int{premiumBudget})
		b.Logf("ladder: %s", lad)
		alone := r.crawl(b, ladderSelectors[:1], []int{premiumBudget})
		b.Logf("cheap tier alone: %s", alone)
		unbounded := r.crawl(b, ladderSelectors, nil)
		b.Logf("ladder without the tier's budget: %s", unbounded)
		b.ReportMetric(lad.climb.Seconds(), "climb-s")
		b.ReportMetric(lad.back.Seconds(), "back-s")
		b.ReportMetric(float64(lad.maxPremium), "max-premium-leases")
		b.ReportMetric(lad.blockedGoodput, "blocked-pages/s")
		b.ReportMetric(lad.blocked403*100, "blocked-403-%")
		b.ReportMetric(lad.afterPremium*100, "premium-after-return-%")
		b.ReportMetric(alone.blockedGoodput, "cheap-alone-blocked-pages/s")
		b.ReportMetric(float64(unbounded.maxPremium), "unbounded-max-premium-leases")
		switch {
		case lad.climb > cooldown:
			b.Errorf("the leases moved to premium %v after the block began, want within the cooldown window %v", lad.climb, cooldown)
		case lad.maxPremium > premiumBudget:
			b.Errorf("%d premium leases at once, over the tier's budget %d", lad.maxPremium, premiumBudget)
		case lad.back > cooldown+time.Second:
			b.Errorf("the leases came back to the cheap tier %v after the block ended, want within the cooldown window %v", lad.back, cooldown)
		case lad.afterPremium > 0:
			b.Errorf("%.0f%% of the grants after the return were premium, want none", lad.afterPremium*100)
		case lad.blockedGoodput == 0:
			b.Error("the ladder served nothing while the cheap tier was blocked")
		}
		// The negative control: the cheap tier alone serves nothing while
		// it is blocked, or the benchmark does not show the ladder's effect.
		if alone.blockedGoodput > 0 {
			b.Errorf("the cheap tier alone served %.1f pages a second while blocked: the benchmark shows nothing", alone.blockedGoodput)
		}
		if unbounded.maxPremium <= premiumBudget {
			b.Errorf("without the tier's budget the crawl held at most %d premium leases: the budget of %d was never tested", unbounded.maxPremium, premiumBudget)
		}
	}
}

type ladderResult struct {
	// climb is from the block's start until every grant is premium (for a
	// second); back from its end until every grant is cheap again (for a
	// second); -1 s when never.
	climb, back time.Duration
	// maxPremium is the most premium leases for the site live at once, as
	// the store counted them.
	maxPremium int
	// blockedGoodput is pages a second served while the block lasted;
	// blocked403 the 403s' share of the answers then.
	blockedGoodput, blocked403 float64
	// afterPremium is the premium share of the grants from a cooldown
	// window after the block's end to the run's end.
	afterPremium float64
}

func (r ladderResult) String() string {
	return fmt.Sprintf("climbed in %v, back in %v after the block; at most %d premium leases at once (budget %d); while blocked %.1f pages/s, 403s %.1f%%; premium grants after the return %.0f%%",
		r.climb, r.back, r.maxPremium, premiumBudget, r.blockedGoodput, r.blocked403*100, r.afterPremium*100)
}

type ladderRig struct {
	store *lease.Store
	api   string
	// cheap are the names of the cheap tier's Squids (the Via the site
	// refuses while blocked).
	cheap  []string
	crawls int
}

func startLadderRig(b *testing.B) *ladderRig {
	b.Helper()
	opts := leasing.DefaultOptions()
	opts.MaxLeasesPerProxy = ladderWorkers
	opts.CooldownWindow = cooldown
	r := &ladderRig{}
	var squids []squid
	for i := range cheapProxies + premiumProxies {
		tier, name := "cheap", fmt.Sprintf("ladder-cheap-%d", i)
		if i >= cheapProxies {
			tier, name = "premium", fmt.Sprintf("ladder-premium-%d", i-cheapProxies)
		} else {
			r.cheap = append(r.cheap, name)
		}
		squids = append(squids, squid{name: name, attrs: map[string]string{"tier": tier}})
	}
	r.store, r.api = startFleet(b, ladderSquidAddrs, opts, squids)
	return r
}

// grant is one fetch: when its lease was granted, on which tier, and
// whether the site refused it.
type grant struct {
	at      time.Time
	tier    int
	refused bool
}

// crawl runs ladderWorkers against a fresh site for ladderRun, the cheap
// tier blocked for the first blockFor, leasing with selectors under a
// SitePolicy of higherTiers (the controls run the block only).
func (r *ladderRig) crawl(b *testing.B, selectors []map[string]string, higherTiers []int) ladderResult {
	b.Helper()
	r.crawls++
	site := fmt.Sprintf("127.0.20.%d", r.crawls)
	var blocked atomic.Bool
	blocked.Store(true)
	pageURL, stop := serveSite(b, site, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		via := req.Header.Get("Via")
		if blocked.Load() && slices.ContainsFunc(r.cheap, func(n string) bool { return strings.Contains(via, " "+n+" ") }) {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		time.Sleep(ladderPage)
		_, _ = w.Write([]byte("page\n"))
	}))
	defer stop()
	pol := sites.Policy{Name: "ladder", Sites: []string{site}, MinConcurrency: 1, MaxConcurrency: ladderWorkers,
		IncreaseInterval: sites.DefaultIncreaseInterval, DecreaseFactor: sites.DefaultDecreaseFactor, HigherTiers: higherTiers}
	r.store.SetSitePolicies([]sites.Policy{pol})
	defer r.store.SetSitePolicies(nil)
	c, err := client.New(r.api, token)
	if err != nil {
		b.Fatal(err)
	}
	run := ladderRun
	if len(selectors) == 1 || higherTiers == nil {
		run = blockFor // a control needs only the block
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	start := time.Now()
	unblock := time.AfterFunc(blockFor, func() { blocked.Store(false) })
	defer unblock.Stop()

	// The store's own count of premium leases, sampled.
	var maxPremium atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			for _, st := range r.store.SiteStatuses() {
				if len(st.TierLive) > 1 && int64(st.TierLive[1]) > maxPremium.Load() {
					maxPremium.Store(int64(st.TierLive[1]))
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var mu sync.Mutex
	var grants []grant
	var wg sync.WaitGroup
	for i := range ladderWorkers {
		flow := fmt.Sprintf("pod-%d", i%4)
		wg.Go(func() {
			for _, g := range ladderWork(ctx, c, flow, site, pageURL, selectors) {
				mu.Lock()
				grants = append(grants, g)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	<-sampled
	slices.SortFunc(grants, func(a, b grant) int { return a.at.Compare(b.at) })
	unblockAt := start.Add(blockFor)
	res := ladderResult{maxPremium: int(maxPremium.Load())}
	res.climb = settled(grants, start, unblockAt, 1)
	res.back = settled(grants, unblockAt, start.Add(run), 0)
	var ok, refused, after, afterPremium int
	for _, g := range grants {
		switch {
		case g.at.Before(unblockAt) && g.refused:
			refused++
		case g.at.Before(unblockAt):
			ok++
		case g.at.After(unblockAt.Add(cooldown)):
			after++
			if g.tier > 0 {
				afterPremium++
			}
		}
	}
	res.blockedGoodput = float64(ok) / blockFor.Seconds()
	if ok+refused > 0 {
		res.blocked403 = float64(refused) / float64(ok+refused)
	}
	if after > 0 {
		res.afterPremium = float64(afterPremium) / float64(after)
	}
	return res
}

// settled is how long after from the grants of [from, to) became all of
// tier for a second, and stayed so until the next cooldown expiry could
// change it (the first second in which every grant is on tier); -1 s when
// never.
func settled(grants []grant, from, to time.Time, tier int) time.Duration {
	for at := from; at.Add(time.Second).Before(to); at = at.Add(100 * time.Millisecond) {
		n, all := 0, true
		for _, g := range grants {
			if g.at.Before(at) || !g.at.Before(at.Add(time.Second)) {
				continue
			}
			n++
			if g.tier != tier {
				all = false
				break
			}
		}
		if n > 0 && all {
			return at.Sub(from)
		}
	}
	return -time.Second
}

// ladderWork is one worker until ctx ends: lease with selectors, fetch,
// report a 403 banned, release. It returns its grants.
func ladderWork(ctx context.Context, c *client.Client, flow, site, pageURL string, selectors []map[string]string) []grant {
	var out []grant
	for ctx.Err() == nil {
		req := wire.AcquireRequest{Target: site, Flow: flow, TTLSeconds: 60, WaitSeconds: 2}
		if len(selectors) == 1 {
			req.Selector = selectors[0]
		} else {
			req.Selectors = selectors
		}
		l, err := c.Acquire(ctx, req)
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		at := time.Now()
		status, err := fetch(l, pageURL)
		refused := status == http.StatusForbidden
		result := ""
		if refused {
			result = wire.ResultBanned
		}
		endLease(c, l, result, site)
		if err == nil && ctx.Err() == nil {
			out = append(out, grant{at: at, tier: l.Tier, refused: refused})
		}
	}
	return out
}
