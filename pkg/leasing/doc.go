// Package leasing owns the lease path shared by both lease APIs: the Service
// each front door calls (service.go) with its one request type and its
// limits (request.go) and its one error vocabulary (errors.go), the lease
// store (pkg/lease) with the wait queue (pkg/flowcontrol) in front of it,
// the adapter between the two (dispatcher.go) and the waiter that maps the
// queue's outcomes (waiter.go), their flags (options.go), the runnables
// that sweep the store and shut the queue down (queue.go), and the Gate that
// lets only the replica that leads serve leases, once it has taken them over
// (gate.go); and the operator's lease wing built in one constructor
// (wing.go: NewWing, with signed lease IDs and the checkpoint, and
// Register, which adds it to a manager), so that cmd only composes it.
//
// It must not import pkg/discovery, pkg/apiserver or cmd. It is the one
// package that imports both pkg/lease and pkg/flowcontrol; the front doors
// import it and declare no store or queue interfaces of their own.
package leasing
