// Package bootstrap tests what the operator sets up for itself in its
// namespace, against a real kube-apiserver: the serving certificate Secret,
// its renewal and the CA bundle it publishes (pkg/certs), and the discovery
// token Secret it creates and follows (pkg/discovery). Time-dependent
// renewal runs on a fake clock.
//
// This package holds tests only; nothing may import it.
package bootstrap
