// Package flowcontrol owns lease requests that wait for capacity: a request
// that finds no eligible proxy is queued instead of answered 409, and is
// granted the moment capacity appears, with strict priority between bands,
// max-min fairness between flows of a band and FIFO among the requests of a
// flow that compete for the same capacity (a class, see below).
//
// # Shape
//
// Core is pure: one mutex (plus a leaf lock for the list of reported Held
// changes), no goroutines, time from an injected clock.PassiveClock. Its operations are Enqueue, Cancel, OnCapacity (a
// capacity event), Advance (what is due at now) and NextWakeup (when Advance
// is next needed). Controller adds one clock.AfterFunc timer pointed at
// NextWakeup — there is no polling tick — and the blocking
// EnqueueAndWait(ctx, Request) (Outcome, G, error).
//
// Ordering. Priority: higher Request.Priority first, strictly. Within a band
// the flow holding the fewest grants (Dispatcher.Held; the lease dispatcher
// answers what the flow's identity holds over all its flows, so shares are
// per identity first) goes first, ties to
// the flow served least recently: each grant — in a round or on the fast
// path — is a turn that moves its flow behind every other; a flow keeps its
// turn while it does not wait (it is remembered, see below), and a flow
// never served goes before every served one, in the order flows joined.
// Within a flow, first come first served among requests of one class; the
// flow offers the oldest head among its classes. A class whose head matches
// nothing free is parked for the round and the flow offers its next class; a
// flow with every class parked is skipped for the round, so it never blocks
// other flows.
//
// # Classes
//
// A flow is one crawler, and a crawler asks for proxies for many sites. A
// proxy cooling down for site A is free for site B, so FIFO over a whole
// flow would let one rate-limited site stall the crawler's every other site
// for up to the cooldown window, with idle proxies in the fleet (head-of-line
// blocking). A Dispatcher that implements Classifier keys each request by
// what decides which capacity it can use (the lease store: namespace,
// selector and target). Within a flow and band each class is its own FIFO
// (an intrusive list); the flow keeps its classes in a small heap by head
// sequence.
//
// Why sub-queues and not "skip an unservable head and try the next
// request": two requests of one class compete for exactly the same capacity
// (the Classifier's contract), so once a class head finds nothing free every
// later request of that class would too. Parking the class tries each class
// once per round, O(classes) offers instead of O(requests), and order within
// a class — the order among requests competing for the same proxies — is
// kept by construction.
//
// Fairness between flows is unchanged: the flow, not the class, holds the
// turn and the held count, so a crawler of ten sites gets one flow's share,
// spent on whichever of its classes can use what is free; the simulation's
// figures are those of per-flow FIFO whenever classes do not matter, and
// sim_test.go has a crawler of two sites, with per-flow FIFO as the negative
// control. A flow has at most MaxQueuedPerFlow classes in a band; looking a
// class up is a linear scan of them.
//
// A request refused (no deadline) because its class waits, or evicted at its
// deadline behind others of its class, says so: RejectedError.QueuedAhead and
// EvictedError.QueuedAhead count the requests of its class ahead of it
// (QueuedAhead(err)), so the front doors can tell "your own earlier requests
// for the same thing wait" from "the fleet is busy".
//
// Why remember turns: with one proxy every release finds the contending
// flows holding nothing, and a flow whose only request was just granted is
// idle until its next request arrives, after its release was dispatched. A
// flow that "joins the back" on its return then lands behind a flow with two
// requests served after it, which gets two turns for every one of the other.
// The turns of idle flows are kept in two generations of at most
// max(Options.MaxQueued, 4096) flows each (turns.go says why that bound
// suffices); a flow forgotten after a long absence counts as never served,
// so forgetting never costs it its turn.
//
// Fast path. A request is offered to the dispatcher at once when that cannot
// overtake anyone owed the capacity: nothing waits, or every waiting head was
// already offered the current free capacity and could not use it (and its own
// class does not wait in its flow and band). Besides the dispatcher's call it costs a
// counter increment and one map write (the turn); nothing is allocated once
// the turn memory has grown.
//
// Events. Every capacity event (OnCapacity, or the timer reaching
// NextChange) runs a full round: each band, highest first, offers its heads
// to the dispatcher in policy order (a per-band heap keyed by held count and
// turn) until the dispatcher is exhausted or every head was
// served or found unmatched. Held counts change outside the controller, so a
// round re-reads Held for every waiting flow of the bands it visits — unless
// the dispatcher's owner reports changes (Options.HeldChangeNotifications,
// HeldChanged), in which case only the reported flows are re-read and a
// round costs O(grants · log flows). Removals (cancel, deadline) offer only
// the heads they expose. Deadlines sit on a heap; the earliest deadline and
// Dispatcher.NextChange drive the single timer.
//
// Tickets. A queued request is a Ticket whose state moves once, by
// compare-and-swap, from pending to dispatched, cancelled or evicted. A caller
// whose context ends races the grant without the mutex; if the grant won,
// Cancel gives it back through Dispatcher.Release, so a grant is never leaked
// and released at most once by this package.
//
// Outcomes and errors. Dispatched; rejected (never queued: capacity, other)
// as *RejectedError wrapping ErrRejected (capacity rejections carry
// RetryAfter for HTTP 429); evicted (was queued: deadline, cancelled,
// shutdown, other) as *EvictedError wrapping ErrEvicted. Helpers: IsRejected,
// IsEvicted, IsQueueFull, IsShutdown, IsDeadline, IsCancelled, RetryAfter,
// OutcomeOf.
//
// Metrics go to the Metrics interface; flowcontrolmetrics implements it with
// Prometheus (queue length per band, wait-time histogram, outcomes counter).
//
// # What an adapter over the lease store must do
//
// The lease store (pkg/lease) offers TryAcquire, HeldBy, Release, NextChange
// and an OnCapacity hook; this package imports nothing of it. The adapter
// that wires the two (pkg/leasing, dispatcher.go) must:
//
//  1. TryDispatch(flow, payload): call store.TryAcquire with the payload's
//     namespace, selector, target, TTL and holder, and with
//     AcquireRequest.Flow = flow, so the new lease counts towards
//     HeldBy(flow) at once. lease.IsNoMatch(err) → (zero, NoMatch, nil); a
//     lease → (lease, Granted, nil); any other error (TTL too long, name
//     taken) → that error: the request is rejected or evicted as Other.
//     Return Exhausted only when certain that no request at all could be
//     granted now (no proxy with a free slot); NoMatch is always correct.
//  2. Held(flow): store.HeldBy(flow) — live leases whose Flow is flow,
//     including leases acquired without waiting.
//  3. Release(grant): store.Release(grant's lease ID). Called without this
//     package's mutex, at most once per grant, only for grants whose waiter
//     had left.
//  4. NextChange(): store.NextChange() — the next lease expiry or cooldown
//     end, zero if none; instants at or before now are ignored. The
//     controller re-reads it after every change while requests wait.
//  5. Wire store.OnCapacity(controller.OnCapacity) directly. OnCapacity
//     never blocks on a lock (it sets a flag and runs the round only if it
//     gets the mutex with TryLock; otherwise the holder runs it before
//     letting go), so it is safe where the store runs hooks: after its own
//     lock is released, on the goroutine of whichever store call observed the
//     change — including a TryDispatch, Held or NextChange this package is
//     making with its mutex held. The hook must fire on every change that can
//     make capacity appear (release, expiry or cooldown end observed, proxy
//     added, turned healthy or re-labelled, limit raised), and should fire,
//     or the controller's timer may be late, when NextChange moves earlier
//     than it was (a direct acquisition with a short TTL). It must not fire on
//     every call regardless of change (each signal costs a full round).
//  6. Lock order is controller → store: TryDispatch, Held and NextChange run
//     under the controller's mutex and must not call the controller except
//     through OnCapacity and HeldChanged (neither waits for the mutex).
//  7. Implement Classifier: key a request by namespace, selector and target,
//     so that a request waiting for a target every proxy cools for does not
//     hold back the flow's requests for other targets.
//  8. For scale (thousands of waiting flows), set
//     Options.HeldChangeNotifications and forward the store's lease events:
//     store.Subscribe(func(ev lease.Event) { if ev.Type == lease.Added ||
//     ev.Type == lease.Deleted { controller.HeldChanged(ev.Lease.Flow) } })
//     (Added, not Reason Acquired: a lease taken back after a crash counts
//     towards its flow too).
//     HeldChanged only appends to a list under a leaf lock, so it is safe in
//     a Subscribe callback. And return Exhausted when the store has no free
//     slot at all (a cheap check on its availability index would do): a
//     round then stops at the first refusal instead of offering every head.
//
// Acquisitions that bypass the controller (requests with no wait) can take
// capacity a waiter is owed between a release and the round it triggers;
// routing every acquisition through EnqueueAndWait avoids that.
//
// # Imports
//
// This package must not import pkg/lease, pkg/discovery, pkg/apiserver,
// pkg/metrics or github.com/prometheus (flowcontrolmetrics does that).
package flowcontrol
