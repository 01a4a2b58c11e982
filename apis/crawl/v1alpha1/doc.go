// Package v1alpha1 holds the Proxy API (group crawl.example.com, version
// v1alpha1): the Go types, their constants and pure helpers, and the
// kubebuilder markers from which controller-gen generates the CRD in
// artifacts/crds (schema, defaults, CEL validation, printer columns).
//
// Validation lives in the CRD, not in Go: every cross-field rule is a CEL rule
// evaluated by the apiserver, so kubectl, client-go and the operator all see
// the same answer. The Go helpers here assume an object that passed it.
//
// This package must import nothing of pkg/ (the operator's packages import it,
// never the other way round) and keeps no package-level mutable state.
//
// +kubebuilder:object:generate=true
// +groupName=crawl.example.com
package v1alpha1
