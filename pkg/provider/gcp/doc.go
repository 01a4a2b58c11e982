// Package gcp is the "gcp" provider: each proxy instance is a Compute Engine
// VM with its own external (one-to-one NAT) address, so every proxy leaves
// through a distinct egress IP.
//
// It calls exactly four methods of cloud.google.com/go/compute/apiv1's
// InstancesRESTClient: Insert, Get, Delete and AggregatedList. Inserts are
// fire-and-forget: no Operation is ever waited on; readiness comes from Get
// polls, as for pods. An insert that Compute Engine accepts and fails later
// (quota, ZONE_RESOURCE_POOL_EXHAUSTED) shows up only as an instance that
// never appears or 404s; the reconciler handles that as a failed create.
//
// It owns: the insert request built from a Proxy spec (insert.go), the
// status → state table (state.go), the classification of Compute Engine
// errors (errors.go), providerIDs (providerid.go), the tag/owner labels in
// GCE's label syntax, listings with unreachable zones (list.go) and its
// options (options.go).
//
// It must not import pkg/controller, pkg/metrics or cmd; tests run it against
// test/gcefake, which speaks the real REST wire format.
package gcp
