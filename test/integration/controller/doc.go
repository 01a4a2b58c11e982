// Package controller holds the integration tests of the Proxy reconciler:
// a real etcd and kube-apiserver (test/controlplane), a real
// controller-runtime manager running pkg/controller as a user bound only to
// the generated ClusterRole (artifacts/rbac), and the fake provider with
// injected errors. Each test owns a namespace and a manager restricted to
// it, so the tests run in parallel.
//
// It has no non-test code; it must not be imported.
package controller
