// Package install tests the shipped install (artifacts/install, rendered by
// kubectl's built-in kustomize) against a real kube-apiserver: every overlay
// passes server-side dry-run; the production overlay applied for real creates
// every object it renders; and the operator, run with the Deployment's own
// arguments as its ServiceAccount (so with the RBAC the install grants, never
// admin), creates its serving certificate, CA ConfigMap, APIService caBundle
// and discovery token by itself and serves the HTTP API over verified TLS.
//
// There is no kubelet here: the operator runs in this process with the
// Deployment's arguments, not from the image in a pod.
//
// This package holds tests only; nothing may import it.
package install
