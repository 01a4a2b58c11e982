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
// This package holds tests only; nothing may import it.
package restart
