// Package restart proves that a planned restart of the operator loses no
// lease: it runs the real binary as its own process with a lease checkpoint
// (--lease-checkpoint-secret), fills it with 10,000 live leases (over HTTP
// and as ProxyLeases through kube-apiserver) and 1,000 cooldowns on 100
// External proxies (a forward proxy in this process), sends SIGTERM, starts
// it again and checks that every lease is there with the same ID, proxy,
// holder and expiry, every cooldown still holds, and the ProxyLease list has
// the same resourceVersion, from which a watch resumes. The unavailability
// of the restart is logged. Then it SIGKILLs the operator after a checkpoint
// and checks that every checkpointed lease is back.
//
// TestFailover runs two replicas with leader election: only the leader
// serves, the standby answers 503 naming it, a SIGTERM hands over with every
// lease and a SIGKILL is survived within the leader lease duration.
// TestHistoryUnderKills drives clients on five proxies of capacity 1 while
// the leader is terminated or killed at random points and, from the clients'
// recorded history, counts a proxy held by two clients at once: never after
// a planned handover, only for leases granted just before a crash
// (make failover runs 50 kill points; HISTORY_SEED repeats a run).
//
// TestReportsCannotGrowTheOperator sends 40,000 reports with distinct
// targets from one token's leases and checks the operator's RSS and that the
// checkpoint stays one Secret (the per-holder cooldown limit).
//
// This package holds tests only; nothing may import it.
package restart
