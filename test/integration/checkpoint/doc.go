// Package checkpoint tests the lease checkpoint (pkg/checkpoint) against a
// real kube-apiserver and a real lease store: a write only when something
// changed, a round trip of everything the store must keep (sharded when
// large), the resourceVersion base, a tampered checkpoint refused, and the
// last checkpoint written after the servers stopped.
//
// This package holds tests only; nothing may import it.
package checkpoint
