package sitesync

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports each SitePolicy's budget, read from the store at every
// scrape; one series per policy (policies are few, set by cluster admins).
type Collector struct {
	store                          Store
	limit, live, rate, share, cuts *prometheus.Desc
	tier, tierLive                 *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector over store.
func NewCollector(store Store) *Collector {
	l := []string{"policy"}
	return &Collector{
		store: store,
		limit: prometheus.NewDesc("proxy_operator_site_limit",
			"Leases the sites of a SitePolicy may have live now (adapted between its minConcurrency and maxConcurrency).", l, nil),
		live: prometheus.NewDesc("proxy_operator_site_leases_live",
			"Leases for the sites of a SitePolicy live now.", l, nil),
		rate: prometheus.NewDesc("proxy_operator_site_grants_per_second_limit",
			"New leases a second the sites of a SitePolicy may take now (adapted; 0 while unbounded).", l, nil),
		share: prometheus.NewDesc("proxy_operator_site_rate_limited_ratio",
			"Share of a SitePolicy's leases over the last 30-60 s reported rate_limited or banned.", l, nil),
		cuts: prometheus.NewDesc("proxy_operator_site_limit_cuts_total",
			"Cuts of a SitePolicy's limit on rate_limited or banned reports.", l, nil),
		tier: prometheus.NewDesc("proxy_operator_site_tier",
			"The ladder's tier of the newest lease for the sites of a SitePolicy (0: its request's first selector).", l, nil),
		tierLive: prometheus.NewDesc("proxy_operator_site_tier_leases_live",
			"Leases for the sites of a SitePolicy live now on each tier of a ladder (for policies with higher tiers in use or bounded).",
			[]string{"policy", "tier"}, nil),
	}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.limit
	ch <- c.live
	ch <- c.rate
	ch <- c.share
	ch <- c.cuts
	ch <- c.tier
	ch <- c.tierLive
}

// Collect reads the store.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.store.SiteStatuses() {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.Limit), st.Policy)
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(st.Live), st.Policy)
		ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, st.Rate, st.Policy)
		ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, st.RefusedShare, st.Policy)
		ch <- prometheus.MustNewConstMetric(c.cuts, prometheus.CounterValue, float64(st.Cuts), st.Policy)
		ch <- prometheus.MustNewConstMetric(c.tier, prometheus.GaugeValue, float64(st.Tier), st.Policy)
		for i, n := range st.TierLive {
			ch <- prometheus.MustNewConstMetric(c.tierLive, prometheus.GaugeValue, float64(n), st.Policy, strconv.Itoa(i))
		}
	}
}
