// Package gcefake is a Compute Engine endpoint for tests and the dev
// environment: an HTTP server speaking the real compute/v1 REST wire format
// (protojson bodies with int64 as strings, Operation bodies, googleapi error
// bodies, AggregatedList with scoped items, NO_RESULTS_ON_PAGE warnings,
// paging and unreachables) for the four instance calls the gcp provider
// makes: insert, get, delete and aggregatedList.
//
// Instances boot PROVISIONING → STAGING → RUNNING across Get polls and get
// their natIP only once RUNNING. A Backend serves each instance: SquidBackend
// runs a real Squid on its own loopback address, which becomes the natIP, so
// health probes go through a real proxy. Faults can be injected per call and
// per instance: error codes and reasons, slowness, inserts that are accepted
// and then vanish, zones that listings cannot reach, and random transient
// failures.
//
// It is test support: it imports computepb for the wire types, the node
// agent's Squid helpers and nothing of pkg/ but the providers' label and metadata names.
package gcefake
