// Package install tests the shipped installs against a real kube-apiserver:
// the kustomize overlays (artifacts/install, rendered by kubectl's built-in
// kustomize) and the Helm chart (artifacts/charts/proxy-operator, rendered by
// the pinned bin/helm).
//
// Every overlay, and the chart with its defaults and each ci/ values file,
// passes server-side dry-run; the chart renders the same objects as the
// overlay it stands for; the production overlay applied for real creates
// every object it renders; and the operator, run from the Deployment's own
// arguments as its ServiceAccount (so with the RBAC the install grants, never
// admin), creates its serving certificate, CA ConfigMap, APIService caBundle
// and discovery token by itself, or (the chart's certManager mode) serves the
// mounted certificate, and serves the HTTP API over verified TLS.
//
// There is no kubelet here: the operator runs as a process of this test with
// the Deployment's arguments, not from the image in a pod. The Prometheus
// Operator's CRDs in testdata stand in for a cluster that runs it.
//
// This package holds tests only; nothing may import it.
package install
