package flowcontrolmetrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
)

const (
	namespace = "proxy_operator"
	subsystem = "flowcontrol"
)

// Metrics is the Prometheus implementation of flowcontrol.Metrics. It is a
// prometheus.Collector: register it once.
type Metrics struct {
	queueLength *prometheus.GaugeVec
	wait        *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	abandoned   prometheus.Counter

	// Children resolved once per label value, so the hot path does no
	// label hashing (the controller calls these under its mutex).
	waitBy     map[string]prometheus.Observer
	requestsBy map[string]prometheus.Counter

	mu    sync.Mutex
	bands map[int]prometheus.Gauge
}

var (
	_ flowcontrol.Metrics  = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// WaitBuckets are the wait-time histogram buckets, in seconds: 1ms to about
// 4.4 minutes, a factor of 4 apart, covering waits from "granted on the next
// release" to the longest waitSeconds a client may ask for.
func WaitBuckets() []float64 { return prometheus.ExponentialBuckets(0.001, 4, 10) }

// DefaultBand is the priority band of a request that names none: its queue
// length series exists from the start, so that a dashboard or an alert sees
// 0 before any request has waited, not "no data".
const DefaultBand = 0

// New returns unregistered metrics with every outcome series, and the
// default band's queue length, present at zero.
func New() *Metrics {
	m := &Metrics{
		queueLength: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "queue_length",
			Help: "Lease requests waiting for capacity, per priority band.",
		}, []string{"band"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "wait_seconds",
			Help:    "Time lease requests spent waiting, by outcome (zero for requests granted or rejected at once).",
			Buckets: WaitBuckets(),
		}, []string{"outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "requests_total",
			Help: "Lease requests handled by flow control, by outcome.",
		}, []string{"outcome"}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "abandoned_grants_total",
			Help: "Grants given back because the waiting caller had left.",
		}),
		waitBy:     map[string]prometheus.Observer{},
		requestsBy: map[string]prometheus.Counter{},
		bands:      map[int]prometheus.Gauge{},
	}
	for _, o := range flowcontrol.Outcomes() {
		l := o.String()
		m.waitBy[l] = m.wait.WithLabelValues(l)
		m.requestsBy[l] = m.requests.WithLabelValues(l)
	}
	m.FlowControlQueueLength(DefaultBand, 0)
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.queueLength.Describe(ch)
	m.wait.Describe(ch)
	m.requests.Describe(ch)
	m.abandoned.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.queueLength.Collect(ch)
	m.wait.Collect(ch)
	m.requests.Collect(ch)
	m.abandoned.Collect(ch)
}

// FlowControlQueueLength implements flowcontrol.Metrics.
func (m *Metrics) FlowControlQueueLength(band int, n int) {
	m.mu.Lock()
	g, ok := m.bands[band]
	if !ok {
		g = m.queueLength.WithLabelValues(strconv.Itoa(band))
		m.bands[band] = g
	}
	m.mu.Unlock()
	g.Set(float64(n))
}

// FlowControlWait implements flowcontrol.Metrics.
func (m *Metrics) FlowControlWait(d time.Duration, outcome string) {
	o, ok := m.waitBy[outcome]
	if !ok {
		o = m.wait.WithLabelValues(outcome)
	}
	o.Observe(d.Seconds())
}

// FlowControlOutcome implements flowcontrol.Metrics.
func (m *Metrics) FlowControlOutcome(outcome string) {
	c, ok := m.requestsBy[outcome]
	if !ok {
		c = m.requests.WithLabelValues(outcome)
	}
	c.Inc()
}

// FlowControlAbandoned implements flowcontrol.Metrics.
func (m *Metrics) FlowControlAbandoned() { m.abandoned.Inc() }
