// Package proxyauth makes leases enforceable at the proxy: per-lease proxy
// credentials that the operator mints and every proxy it runs checks.
//
// It owns the credential format, the key hierarchy (one installation key in a
// Secret; per-proxy keys derived from it, so a proxy holds only its own and
// cannot mint for another), the helper's configuration, the Squid stanza that
// runs the helper, the helper itself (Squid's basic-auth helper protocol) and
// the list of live leases a helper polls from the operator to stop a released
// lease's credentials within the poll interval.
//
// A credential is username = a handle of the lease ID (Handle), password =
// issue time, expiry and an HMAC under the proxy's key over the proxy, the
// username and both times. It expires with the lease (a renew mints a new
// one). A helper accepts it while its live list, refreshed every
// PollInterval, holds the handle or is older than the credential; with no
// fresh list (the operator unreachable), until it expires.
//
// Must not import sigs.k8s.io/controller-runtime, k8s.io/client-go,
// k8s.io/apimachinery, pkg/lease, pkg/leasing or pkg/discovery: the helper
// binary links it and runs inside every proxy.
package proxyauth
