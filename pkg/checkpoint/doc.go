// Package checkpoint keeps the lease store's durable state (pkg/lease State:
// live leases, cooldowns, recently ended leases, the revision counter) in
// Secrets of the operator's namespace, so that a restart loses none of it.
//
// It owns the wire format (versioned JSON, gzip-compressed: format.go), the
// write loop (at most one write per interval, none while nothing changed, a
// last one at shutdown after the lease servers have stopped:
// checkpointer.go), the journal (journal.go, segments.go), the snapshot's
// shard protocol (shards.go) and the takeover (fence, then load: load.go).
// A Recorder (pkg/metrics) sees every write and when the checkpoint last
// held the store's state.
//
// # A snapshot, then a journal of what changed
//
// A write costs what changed, not what is held. The checkpoint is a
// snapshot of the whole state followed by a journal: each write while
// leases change is one journal segment (a Secret holding that interval's
// changes: leases new or changed in full, cooldowns and ended leases new,
// the IDs of those gone) and an update of the index Secret naming it. With
// 80 lease changes a second that is about 200 bytes per change at 5,000
// and at 20,000 held leases, where writing the whole state each second was
// 5,300 and 17,000 (docs/benchmarks.md).
//
//   - What changed is found by comparing the state with what the checkpoint
//     holds (journal.go: each lease's revision, which moves with every change
//     the API shows; each cooldown's end; each ended lease's ID), not by
//     hooks in the store: the store stays unaware of the checkpoint, and the
//     comparison costs CPU (about 0.13 s at 100,000 leases), not bytes.
//   - A snapshot is written instead when the journal would outgrow the last
//     snapshot (so a takeover reads at most about twice a snapshot, and a
//     snapshot costs at most what the journal before it did: amortized, a
//     change costs at most twice its journal bytes), when the journal holds
//     Options.JournalSegments segments (300: at one write a second, a
//     snapshot every five minutes at most while leases change, and a takeover
//     lists at most that many), when leftovers of failed writes wait to be
//     deleted, at the first write after a load (a generation of this writer's
//     own: what a killed or fenced writer left of the last one goes), and at
//     shutdown (the successor, or the release before the journal, reads one
//     snapshot).
//   - The index Secret carries no payload, so that a journal write updates a
//     few hundred bytes. It names the snapshot's generation, its shard count
//     and digest, and the last journal segment. Snapshot shards are
//     <name>-<generation>-<n>, journal segments <name>-<generation>-j<n>
//     (labelled with the generation: a load lists them in one call), each
//     with its own digest.
//   - No object exceeds 512 KiB: a shard holds at most 360 KiB of payload
//     (480 KiB as JSON's base64), and a change that would not fit in one
//     segment is written as a snapshot.
//   - Idle, nothing is written.
//
// # What a crash and a takeover may see
//
// Every write commits by updating the index under its resourceVersion, after
// every part it names exists: a reader sees the checkpoint before the write
// or after it, never a part of it, and a crash loses at most the changes of
// the last interval (those leases stay reclaimable: pkg/leaseid). A
// segment created and not committed (a kill, a lost answer) is not named
// and is deleted later; a name already taken turns the write into a
// snapshot under a later generation. The replica taking over first rewrites
// the index as its own (fence): from then on every write of the replica
// before fails with ErrFenced, whether a journal segment or a snapshot.
// Errors that say nothing about the checkpoint are retried while this
// replica leads; only a checkpoint proven corrupt (a digest, a missing part,
// an undecodable document) is skipped.
//
// # Why Secrets
//
// The checkpoint holds lease IDs (signed: an ID proves a lease to the
// operator after a crash), holders' identities, and the labels and
// annotations users gave their ProxyLeases. Secrets are what clusters
// encrypt at rest (EncryptionConfiguration most often names only them) and
// what RBAC habits keep from readers (the built-in view role reads
// ConfigMaps, not Secrets). Their cost is the blast radius: every write
// wakes every Secret watcher in the cluster (cert-manager, Argo CD, any
// operator with a Secret informer), each receiving the object whole. The
// journal keeps that proportional to the lease churn: one segment (a few
// KiB) and one small index update a second under churn, a snapshot every
// few minutes, nothing idle. A custom resource of our own would wake only
// our watchers but would be stored in plain text unless the cluster's
// encryption configuration names it, which few do; ConfigMaps wake as many
// watchers and are readable more widely. Secrets it is.
//
// # Upgrades and downgrades
//
// The snapshot's document is the format of the release before the journal
// (version 1, unchanged), and its layout reads the same to that release's
// reader (the index's payload, empty here, then shards 1..shards-1). An
// upgrade: the new release loads the old checkpoint (index with payload)
// and its first write is a snapshot of this layout. A downgrade is
// supported by a rolling handover: the new release's last write is a
// snapshot, which the older release reads whole. After a crash of the new
// release, an older one reads the snapshot and not the journal after it: it
// loses those changes as a crash loses the last interval (leases granted
// since the snapshot come back through their signed IDs; leases released
// since hold their proxies until their TTL). test/integration/checkpoint
// holds both ways (TestUpgradeFromV1AndBack, with the Secrets the release
// before wrote in testdata/v1).
//
// Must not import the front doors (pkg/discovery, pkg/apiserver), pkg/leasing,
// pkg/metrics or controller-runtime's cached client: the API's opaque lease
// metadata comes and goes through the ExtraCodec it is given.
package checkpoint
