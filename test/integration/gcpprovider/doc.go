// Package gcpprovider tests the gcp provider with the whole operator (the
// reconciler, the health engine) on a real control plane, against the
// Compute Engine fake of test/gcefake with a real Squid behind every RUNNING
// instance: create, replacement on spec, zone and cloud-init changes, quota,
// permanent and transient errors, inserts accepted and then failed, delete.
package gcpprovider
