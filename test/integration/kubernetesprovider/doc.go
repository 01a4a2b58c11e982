// Package kubernetesprovider runs the provider contract suite
// (pkg/provider/providertest) against the kubernetes provider on a real
// kube-apiserver, with the local node agent (test/nodeagent) playing the
// kubelet, so instances really reach Running (real Squid on 127.0.0.N) and
// graceful pod deletions complete. It also checks the error classes the real
// apiserver produces (RBAC 403, 422).
//
// Tests only; nothing may import this package.
package kubernetesprovider
