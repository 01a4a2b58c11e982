// Package apiserver embeds the manifests that register the operator's
// aggregated ProxyLease API with kube-apiserver: the APIService and its
// Service, the delegation RBAC of the operator, the ClusterRoles for
// proxyleases aggregated to view/edit/admin, the development variant that
// reaches an operator on this machine through an ExternalName Service
// (dev/), and example leases and crawler RBAC (examples/).
//
// It owns only the embedded files; it must not import pkg/ or apis/.
package apiserver
