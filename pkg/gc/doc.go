// Package gc owns the orphan garbage collector: a leader-elected manager
// Runnable that deletes provider instances no Proxy owns any more (docs/gc.md).
// It closes the one gap the reconciler cannot: a crash after a provider Create
// and before the status write that records it, or a finalizer removed by hand.
//
// It trusts only provable orphans. An instance is deleted only when it
// carries an owner UID (ownership proof), is older than the minimum age (not
// mid-create), and its UID matches no Proxy, a Proxy being deleted included
// (its finalizer owns that deletion). An unreadable Proxy list skips the
// sweep; a provider whose listing fails is skipped; a scope a listing could
// not read is left alone. It refuses a namespace-restricted cache unless told
// otherwise, because Proxies it cannot see would look orphaned.
//
// Files: options.go (flags and the cache-scope rule), sweeper.go (the
// Runnable and its timer), sweep.go (one sweep and its decisions).
//
// It depends on the provider contract (pkg/provider), the API types and
// controller-runtime's client. It must not import the concrete providers
// (pkg/provider/gcp, pkg/provider/kubernetes), pkg/metrics, the reconciler
// (pkg/controller) or cmd: the composition root passes the provider
// registry, the Proxy reader and a Recorder.
package gc
