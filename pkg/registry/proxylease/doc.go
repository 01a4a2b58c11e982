// Package proxylease is the registry of the ProxyLease resource, in the
// layout of k8s.io/sample-apiserver's pkg/registry: the REST storage of
// proxyleases (storage.go: create acquires, update renews, delete releases),
// the report subresource (report.go), the watch cache fed by the lease
// store's events (cache.go), the object a lease renders as (object.go), the
// server-side table (table.go), and statusFor (status.go), the one place the
// leasing Service's error vocabulary becomes Kubernetes API statuses.
//
// Every request goes through the leasing Service (pkg/leasing). It must not
// import pkg/lease, pkg/flowcontrol, pkg/apiserver, pkg/discovery or
// pkg/metrics: the server (pkg/apiserver) builds it and installs it.
package proxylease
