// Package observability embeds what a user who runs the operator monitors it
// with: the PrometheusRule of its alerts (prometheusrule.yaml), their
// promtool unit tests (alerts_test.yaml) and a Grafana dashboard
// (grafana-dashboard.json), so tests can run promtool on the rules and check
// that every expression names a metric the operator really exports.
//
// It owns only the embedded files; it must not import pkg/ or apis/.
package observability
