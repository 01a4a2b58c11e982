// Package checkpoint keeps the lease store's durable state (pkg/lease State:
// live leases, cooldowns, recently ended leases, the revision counter) in
// Secrets of the operator's namespace, so that a restart loses none of it.
//
// It owns the wire format (versioned JSON, gzip-compressed, sharded under the
// 1 MiB object limit: format.go), the write loop (at most one write per
// interval, none while nothing changed, a last one at shutdown after the
// lease servers have stopped: checkpointer.go), the shard protocol (shards
// of a generation no Secret has yet, then the index naming them; a taken
// generation is skipped, abandoned shards deleted: shards.go) and the
// takeover (fence, then load; errors that say nothing about the checkpoint
// are retried while this replica leads, only a checkpoint proven corrupt is
// skipped: load.go). A Recorder (pkg/metrics) sees every write and when the
// checkpoint last held the store's state.
//
// Must not import the front doors (pkg/discovery, pkg/apiserver), pkg/leasing,
// pkg/metrics or controller-runtime's cached client: the API's opaque lease
// metadata comes and goes through the ExtraCodec it is given.
package checkpoint
