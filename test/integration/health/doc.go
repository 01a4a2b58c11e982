// Package health holds the integration tests of the health engine: a real
// etcd and kube-apiserver (test/controlplane), a controller-runtime manager
// running the reconciler (pkg/controller) and the engine (pkg/health) wired
// as cmd/proxy-operator wires them, real Squid processes (Debian's squid
// package, one per test on its own 127.x.y.z:3128) as External-mode
// proxies, and local HTTP and TLS origins as probe targets. Every address is
// on loopback.
//
// It has no non-test code; it must not be imported.
package health
