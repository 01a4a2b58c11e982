// Package lease owns the in-memory lease store: which crawler holds which
// proxy, until when, and which (proxy, target) pairs are cooling down after a
// rate_limited or banned report.
//
// The store knows the fleet (fed from the Proxy cache through UpsertProxy and
// RemoveProxy, or the ProxySync informer handler) and keeps an index of the
// proxies that can take a lease, ordered by (active leases, latency, name), so
// that Acquire never scans the fleet. Everything sits under one mutex; time
// comes from an injected clock, and every call first applies the expiries and
// cooldown ends that are due, so correctness never depends on a timer; Start
// runs the one timer, armed at the store's next change, that delivers each
// expiry's event at its instant.
//
// A lease carries the API metadata it was created with (Metadata: labels,
// annotations, and what else an API keeps, opaque to the store), so its
// events are complete; ended leases stay findable by ID and by name
// (LookupName) for the report window.
//
// Only the holder changes a lease through ReleaseAs, ReportAs, RenewAs and
// UpdateAs (ended leases included); AnyHolder is for callers authorized
// elsewhere.
//
// Files: store.go (the Store, its options), index.go (the availability
// index, selection and no-match counts), acquire.go (granting), leases.go
// (release, report, renew and reads of leases), fleet.go (the proxies),
// expiry.go (expiry and cooldown heaps, the timer), tombs.go (ended leases
// kept for late reports, at most MaxEndedPerHolder per holder), notify.go
// (events to subscribers, capacity hooks), sites.go (the site policies'
// budgets, pkg/sites: checked before a proxy is picked, counted on every
// live lease, cut by reports).
//
// Consumer: pkg/leasing, whose Service both lease APIs call and whose queue
// adapter drives waiting requests (TryAcquire, OnCapacity, HeldBy,
// NextChange).
//
// This package must not import pkg/discovery, pkg/apiserver, pkg/flowcontrol,
// pkg/controller or pkg/metrics; it imports apis/crawl/v1alpha1 only to turn a
// Proxy into a ProxyInfo, and pkg/sites for the site budgets.
package lease
