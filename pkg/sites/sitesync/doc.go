// Package sitesync connects SitePolicies to the lease store: Sync, an
// informer handler, hands the store every policy as it changes, and Status,
// a runnable of the replica that serves leases, writes each policy's budget
// (its limit, live leases, rate-limited share, whether it applies) to its
// status when that changes.
//
// It must not import pkg/leasing, pkg/flowcontrol or cmd; the store is
// behind the small interfaces it defines.
package sitesync
