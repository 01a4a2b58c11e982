// Package checkpoint keeps the lease store's durable state (pkg/lease State:
// live leases, cooldowns, recently ended leases, the revision counter) in
// Secrets of the operator's namespace, so that a restart loses none of it.
//
// It owns the wire format (versioned JSON, gzip-compressed, sharded under the
// 1 MiB object limit), the write loop (at most one write per interval, none
// while nothing changed, a last one at shutdown after the lease servers have
// stopped) and the load at start (before any server answers).
//
// Must not import the front doors (pkg/discovery, pkg/apiserver), pkg/leasing
// or controller-runtime's cached client: the API's opaque lease metadata
// comes and goes through the ExtraCodec it is given.
package checkpoint
