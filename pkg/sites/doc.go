// Package sites keeps each site's budget for the whole fleet
// (docs/sites.md): which sites a SitePolicy covers (Table), and for each
// policy how many leases for its sites may be live at once — its limit,
// moved between the policy's floor and ceiling by AIMD on what crawlers
// report for the site (cut on rate_limited or banned, raised by one after a
// clean interval in which the site used its whole limit) — and how many new
// leases a second it takes, and how many leases for its sites may be live on
// each higher tier of a ladder (a request's prioritized selectors).
//
// It is pure: no goroutines, no locks, time passed in. The lease store
// calls it under its own mutex, where leases are granted for both lease APIs
// and the gateway, so a site's budget is one rule in one place.
//
// It must not import pkg/lease, pkg/leasing, pkg/flowcontrol or cmd (the
// store imports it); it imports apis/crawl/v1alpha1 only to turn a
// SitePolicy into a Policy, and apis/leasing/v1alpha1 only for the length
// of a lease request's ladder of selectors.
package sites
