// Package flowcontrolmetrics implements flowcontrol.Metrics with Prometheus:
// proxy_operator_flowcontrol_queue_length{band} (gauge),
// proxy_operator_flowcontrol_wait_seconds{outcome} (histogram),
// proxy_operator_flowcontrol_requests_total{outcome} (counter) and
// proxy_operator_flowcontrol_abandoned_grants_total (counter).
//
// Nothing registers itself: the composition root creates a Metrics with New
// and registers it (it is a prometheus.Collector) on the registry it owns.
//
// It imports pkg/flowcontrol for the outcome labels and client_golang; it
// must not import pkg/lease, pkg/discovery, pkg/apiserver or pkg/metrics.
package flowcontrolmetrics
