// Package client is a Go client for the discovery HTTP API (docs/api.md):
// list proxies, acquire, report, renew and release leases, with typed errors
// (IsNoMatch, IsUnknownLease, IsQueueFull, …).
//
// It imports only the standard library and pkg/discovery/wire, so crawlers
// can use it without pulling in Kubernetes.
package client
