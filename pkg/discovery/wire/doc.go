// Package wire holds the JSON bodies and error codes of the discovery HTTP
// API (docs/api.md), shared by the server (pkg/discovery) and the Go client
// (pkg/discovery/client).
//
// It imports only the standard library, so a crawler that uses the client
// does not pull in Kubernetes or controller-runtime.
package wire
