// Package crd tests the generated Proxy CRD against a real kube-apiserver:
// CEL and schema validation (each rejection names the offending field),
// defaulting, the status subresource, printer columns and short names through
// kubectl, and `kubectl explain`. One control plane serves the whole package.
//
// It owns only tests; it may import apis/, artifacts/ and test/controlplane,
// and nothing of pkg/ (the CRD is tested on its own).
package crd
