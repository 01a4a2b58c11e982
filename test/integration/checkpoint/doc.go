// Package checkpoint tests the lease checkpoint (pkg/checkpoint) against a
// real kube-apiserver and a real lease store: a write only when something
// changed, a round trip of everything the store must keep (sharded when
// large), the resourceVersion base, a tampered checkpoint refused, the last
// checkpoint written after the servers stopped, and fencing.
//
// Under faults (faults_test.go, make checkpoint-faults): a checkpoint of
// three Secrets (20,000 leases with signed IDs, 20,000 cooldowns) is written
// while the writer is killed after a random number of Secret calls, or
// under transient faults (a 500 or 504 before kube-apiserver, an answer lost
// after it: transport_test.go), or fenced while it still writes; each point
// is followed by a takeover that reads under faults too; the clients'
// history goes through the failover tests' checker (framework.CheckHistory:
// proxies granted twice), and the test counts checkpointed leases lost,
// mixed states, stuck writers and leftover shards. recovery_test.go has one test per fault
// the protocol once had; scale_test.go measures memory, write, takeover and
// churn at 100,000 leases on 10,000 proxies with 100,000 cooldowns.
//
// This package holds tests only; nothing may import it.
package checkpoint
