// Package metrics owns the operator's Prometheus metrics: explicit
// registration on a Registerer the caller passes (no init(), no global
// registry), scrape-time collectors that read the manager cache, and fed
// vectors whose methods satisfy the small recorder interfaces other packages
// declare (provider.RequestRecorder, health.ProbeMetrics,
// leasing.Recorder, gc.Recorder) structurally.
//
// Only the composition root (cmd/proxy-operator) imports this package; the
// packages it observes must not. It imports the API types for listing
// Proxies and nothing else of this module.
package metrics
