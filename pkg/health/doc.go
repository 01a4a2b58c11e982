// Package health owns the health engine: a leader-elected manager Runnable
// that probes every Proxy *through* the proxy (plain HTTP GET via the proxy;
// https URLs through a CONNECT tunnel with TLS inside), keeps per-proxy health
// state (due time, in-flight guard, consecutive counters, thresholded
// verdict) and tells the reconciler about status-affecting changes over a
// buffered channel of controller-runtime generic events.
//
// The engine owns health *state*; the reconciler owns its *representation*
// in .status. The engine therefore never writes to the API server: it reads
// Proxies from the manager's cache (Reader), publishes Snapshots, and sends
// transition events only on the first verdict, a threshold flip, or — while
// healthy — a significant, rate-limited latency change. A failed probe is
// described in its own words (ProbeError, describe.go): whoever may read a
// Proxy must not read through it what an address it points at sends.
//
// It depends on the API types, controller-runtime's client (read-only) and
// event packages, and k8s.io/utils/clock. It must not import pkg/controller,
// pkg/metrics or cmd: the reconciler reads Snapshots through an adapter the
// composition root builds, and metrics arrive through ProbeMetrics.
package health
