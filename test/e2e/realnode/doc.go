// Package realnode runs the README on a real node: `make cluster`'s kubelet,
// containerd and runc, with kube-proxy, CoreDNS and kube-network-policies.
// It installs the operator as the README says (kustomize, then after its
// uninstall the Helm chart), runs the sample fleet's Squid pods under Pod
// Security "restricted", takes the first lease from a crawler pod with its
// ServiceAccount token, fetches a page through the lease and through the
// gateway Service by its DNS name, applies artifacts/proxies' NetworkPolicy,
// restarts and drains the operator under lease load, and uninstalls,
// leaving nothing behind. What differs from the README: the image
// references (.cluster/images), and the origin, a page served on the node's
// stand-in for a public site (.cluster/site-address) instead of
// example.com, and one on a Service (a private address).
//
// It runs only under `make test-realnode` (part of `make test`), which
// brings the cluster up, sets PROXY_OPERATOR_CLUSTER to its state directory
// and tears it down after; elsewhere it skips.
//
// This package holds tests only; nothing may import it.
package realnode
