// Package pool owns the ProxyPool controller: it keeps a pool's Proxies
// (owned by ownerReference and the crawl.example.com/pool label, adopted and
// released as a ReplicaSet does) at the desired size, creating to grow and,
// to shrink, deleting unleased Proxies first and draining a leased one
// (crawl.example.com/draining: the lease store grants it nothing new)
// before deleting it once its leases end or the drain timeout passes. With
// spec.autoscaling the size comes from lease demand: leases held on the
// pool's Proxies plus requests waiting for one the template could serve
// (desired.go, a pure function), scaled up at once and down only after
// scaleDownDelay.
//
// Files: desired.go (the size), reconciler.go (the loop), scale.go (create,
// drain, delete, adopt), status.go (conditions and the one status patch).
//
// It depends on the API types, pkg/lease (keys and requests) and
// controller-runtime; lease demand comes through the Demand interface
// declared here (*leasing.Leasing implements it). It must not import
// pkg/leasing, the front doors (pkg/discovery, pkg/apiserver), the providers
// (pkg/provider/gcp, pkg/provider/kubernetes) or cmd.
package pool
