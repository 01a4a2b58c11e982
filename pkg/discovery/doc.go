// Package discovery serves the plain HTTP lease API (docs/api.md) for
// crawlers outside the cluster: list proxies, acquire, release, report and
// renew leases, with a bearer token.
//
// It owns the HTTP surface only: the lease store (pkg/lease) decides, the
// optional Waiter (pkg/flowcontrol) queues requests that may wait, and the
// Lister reads the fleet. The Server is a manager Runnable that every
// replica runs (NeedLeaderElection false).
//
// This package must not import pkg/flowcontrol, pkg/apiserver, pkg/controller
// or pkg/metrics; those plug in through the small interfaces in
// interfaces.go. The subpackage wire (JSON bodies) imports only the standard
// library; client is the Go client for this API.
package discovery
