// Package examples embeds the sample manifests: the small dev fleet under
// fleet/ (what `make dev` applies) and single-resource examples beside it
// (an External proxy, a GCP proxy) that are documentation, not part of the
// fleet. The integration tests create every one of them against a real
// apiserver, so an example that stops validating fails the build.
//
// It owns only the embedded files; it must not import pkg/.
package examples
