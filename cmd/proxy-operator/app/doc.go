// Package app is the composition root of the proxy-operator binary and holds
// no logic of its own: Options composes each package's options (their
// AddFlags and Validate), and Run builds the manager, the provider registry
// (with the metrics decorator), the metrics, the health engine, the
// reconciler, the orphan collector and the leasing side (pkg/leasing: the
// lease store fed from the Proxy informer with the wait queue in front; the
// HTTP discovery API; the aggregated ProxyLease API server) and wires them
// together. It is the only package that imports pkg/metrics and the concrete
// providers together; nothing imports it but cmd/proxy-operator's main and
// test tooling (the dev environment, test/devenv, runs Run in process;
// integration and e2e tests use Run and NewScheme).
package app
