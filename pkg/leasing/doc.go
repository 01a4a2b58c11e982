// Package leasing owns the lease path shared by both lease APIs: the Service
// each front door calls (service.go) with its one error vocabulary
// (errors.go), the lease store (pkg/lease) with the wait queue
// (pkg/flowcontrol) in front of it, the adapter between the two (waiter.go),
// their flags (options.go), the runnables that sweep the store and shut
// the queue down (queue.go), and the Gate that lets only the replica that
// leads serve leases, once it has taken them over (gate.go).
//
// It imports pkg/lease and pkg/flowcontrol and nothing of the front doors
// (pkg/discovery, pkg/apiserver) or of cmd; the front doors import it and
// declare no store or queue interfaces of their own.
package leasing
