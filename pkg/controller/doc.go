// Package controller owns the Proxy reconciler: the state machine that
// provisions, replaces and deletes provider instances for Managed Proxies,
// represents External endpoints, and turns health snapshots into the
// Healthy condition. It is the only writer of Proxy .status, and it writes it
// once per reconcile, only when something changed (status.go).
//
// One file per phase, after cluster-api's machine controller: managed.go
// (create and observe), replace.go (spec or cloud-init change), delete.go
// (finalizer path), external.go, cloudinit.go, spechash.go, providerfailure.go
// (error classes), createfailures.go (backoff of creates accepted and then
// failed by the provider), status.go (conditions, phase, the deferred patch),
// events.go (Kubernetes Events on transitions).
//
// It depends on the API types, the provider contract (pkg/provider), the
// health engine's Snapshot type (pkg/health) and controller-runtime. It must
// not import concrete providers (pkg/provider/kubernetes, pkg/provider/gcp),
// pkg/metrics or cmd, and uses the engine only through the small interface
// declared here (HealthSource), which *health.Engine satisfies; the
// composition root wires both.
package controller
