package lease

import "github.com/prometheus/client_golang/prometheus"

// ActiveCounter is what the collector reads: *Store implements it.
type ActiveCounter interface {
	// Active returns the number of live leases now.
	Active() int
}

// ActiveLeasesCollector exports proxy_operator_leases_active, read from the
// store at every scrape (a gauge fed on acquire/release would drift). The
// caller registers it; there is no init().
type ActiveLeasesCollector struct {
	store ActiveCounter
	desc  *prometheus.Desc
}

var _ prometheus.Collector = (*ActiveLeasesCollector)(nil)

// NewActiveLeasesCollector returns a collector over s.
func NewActiveLeasesCollector(s ActiveCounter) *ActiveLeasesCollector {
	return &ActiveLeasesCollector{
		store: s,
		desc: prometheus.NewDesc("proxy_operator_leases_active",
			"Live proxy leases in the lease store (HTTP and Kubernetes API), read at scrape time.", nil, nil),
	}
}

// Describe sends the one descriptor.
func (c *ActiveLeasesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect reads the store.
func (c *ActiveLeasesCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.store.Active()))
}
