// Package provider is the contract between the Proxy reconciler and the places
// that run proxy instances (Kubernetes pods, Compute Engine VMs, fakes).
//
// It owns:
//   - the Provider interface and the contract of each method,
//   - CreateRequest, Instance and InstanceState,
//   - the error classes (ErrNotFound, ErrQuotaExceeded, ErrPermanent,
//     ErrTransient), the typed *Error that carries them and Class(err),
//   - deterministic instance names (NameFromUID) and the labels that mark
//     ownership (OwnerUIDLabel, TagLabel, DefaultTag),
//   - the Registry, built from a constructor map handed in by the
//     composition root (no package-level map, no init()),
//   - the WithMetrics decorator and the RequestRecorder interface it feeds.
//
// Sub-packages: providertest is the contract suite every implementation runs
// against itself; fake is an in-memory Provider for tests of the reconciler,
// the garbage collector and the suite itself.
//
// Must not import: concrete providers (pkg/provider/kubernetes,
// pkg/provider/gcp), pkg/controller, pkg/metrics or any metrics library,
// controller-runtime, or cloud SDKs. Implementations import this package,
// never the other way round. The only project import is the API types
// (apis/crawl/v1alpha1) for CreateRequest.Proxy.
package provider
