// Package fairnesse2e tests waiting lease requests (pkg/flowcontrol) through
// the whole stack: a real etcd and kube-apiserver (test/controlplane), the
// operator in-process (cmd/proxy-operator/app.Run) with its HTTP discovery
// API, metrics and aggregated ProxyLease API server on free loopback ports,
// and exactly one External Proxy in front of a real Squid on 127.0.9.x, leased
// exclusively (maxLeasesPerProxy 1).
//
// It checks that two crawlers contending for that proxy alternate fairly,
// first as two HTTP crawlers — two bearer tokens of the operator's token file
// ("token,identity" lines), each identity its own flow — and then as two
// ServiceAccounts on the aggregated API; that a waiter is granted within
// milliseconds of a release; and that a full wait queue answers 429 with
// Retry-After (HTTP) and the matching Kubernetes Status (ProxyLease create).
// The fairness checkers have their own negative controls on synthetic unfair
// sequences.
//
// TestHTTPGreedyCrawlerGetsNoMoreTurns pits a crawler with two workers
// against one with one: turns must alternate between flows, not requests.
//
// One environment serves every test (TestMain): the operator registers its
// metrics on controller-runtime's global registry and can run once per
// process. TestMain fails the run if a squid child outlives it.
// E2E_KEEP_LOGS=1 keeps the operator's log (the path is printed); its tail is
// shown anyway when a test fails.
//
// This package holds tests only; nothing may import it.
package fairnesse2e
