// Package discovery serves the HTTP lease API (docs/api.md) for crawlers
// outside the cluster: list proxies, acquire, release, report and renew
// leases, with a bearer token, over TLS 1.2+ (plain HTTP only when asked for).
//
// It also owns where the API's certificate and tokens come from: its own
// certificate files, re-read when they change, or a provider handed in (the
// operator's own, pkg/certs, through k8s.io/apiserver's
// CertKeyContentProvider interface); a token file, or a token Secret it
// creates when missing and follows (TokenSecret).
//
// It owns the HTTP surface only: the leasing Service (pkg/leasing) decides,
// and serviceAnswer maps its error vocabulary to this API's answers in one
// place, for the network and for InProcess (inprocess.go): the same token
// check, requests and answers for a caller in this process (the gateway),
// without HTTP or JSON. Plain request bodies and the lease answer are read and written
// without reflection (decode.go, encode.go, through pkg/plainjson), held by
// tests to what encoding/json reads and writes. The Server is a manager Runnable that every replica runs
// (NeedLeaderElection false).
//
// This package must not import pkg/lease, pkg/flowcontrol, pkg/apiserver,
// pkg/controller, pkg/certs or pkg/metrics: the leasing Service (pkg/leasing)
// is its one way to the leases. Its subpackages state their own rules: wire holds
// the JSON bodies, client is the Go client for this API.
package discovery
