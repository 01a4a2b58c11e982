// Package controlplane runs a local Kubernetes control plane (etcd and
// kube-apiserver from bin/) on loopback ports for integration tests and for
// `make dev`.
//
// It owns the processes' lifecycle, the certificates they use (serving,
// client, front-proxy/requestheader and service-account keys), the admin
// kubeconfig, and installing the project's CRDs. RBAC is on and the
// aggregation (requestheader) flags are set, so an aggregated API server can
// delegate authentication and authorization to it. There is no
// kube-controller-manager: namespaces are never finalized, nothing is garbage
// collected, aggregated ClusterRoles (view, edit, admin) stay empty and no
// default ServiceAccount is created (the ServiceAccount admission plugin is
// therefore disabled).
//
// It must not import pkg/ or apis/, so that every package of the product
// may be tested against it. Of the module it uses only the embedded CRD
// manifests (artifacts/crds) and the free-port facility (test/ports).
package controlplane
