// Package apiservere2e tests the aggregated ProxyLease API end to end: a real
// etcd and kube-apiserver (test/controlplane), the pkg/apiserver server in
// this process on a loopback port, registered through the ExternalName
// Service and APIService of artifacts/apiserver/dev, and kubectl, client-go
// and the HTTP discovery API against one lease store. It also holds the
// create+delete throughput measurement (run with -bench).
//
// It imports the product's packages; nothing imports it.
package apiservere2e
