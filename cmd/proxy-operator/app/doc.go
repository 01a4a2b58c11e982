// Package app is the composition root of the proxy-operator binary: one
// Options struct (flags and validation) and Run, which builds the manager,
// the provider registry (with the metrics decorator), the metrics, the
// health engine and the reconciler, and the leasing side — the lease store
// fed from the Proxy informer, the wait queue (pkg/flowcontrol) with its
// adapter over the store, the HTTP discovery API and the aggregated
// ProxyLease API server — and wires them together. It is the only
// package that imports pkg/metrics and the concrete providers together;
// nothing imports it but cmd/proxy-operator's main and test tooling (the
// dev environment, test/devenv, runs Run in process; integration and e2e
// tests use Run, NewScheme and HealthSource).
package app
