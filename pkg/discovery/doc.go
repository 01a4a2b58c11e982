// Package discovery serves the plain HTTP lease API (docs/api.md) for
// crawlers outside the cluster: list proxies, acquire, release, report and
// renew leases, with a bearer token.
//
// It owns the HTTP surface only: the leasing Service (pkg/leasing) decides,
// and writeServiceError maps its error vocabulary to status codes in one
// place. The Server is a manager Runnable that every replica runs
// (NeedLeaderElection false).
//
// This package must not import pkg/flowcontrol, pkg/apiserver, pkg/controller
// or pkg/metrics. The subpackage wire (JSON bodies) imports only the standard
// library; client is the Go client for this API.
package discovery
