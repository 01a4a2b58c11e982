// Command cluster is `make cluster`: a one-node Kubernetes cluster on this
// machine, in the foreground until Ctrl-C, built from pinned sources
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
// kube-proxy, CoreDNS with the plugins its Corefile names, and
// kube-network-policies where this kernel can run it: `hack/tools/install.sh`
// and `install.sh cluster`) and Debian's containerd, runc and CNI plugins.
//
// The node lives in a network namespace of its own, joined to the machine
// by one veth pair and routed nowhere else; its daemons run in a mount
// namespace of their own (so every mount they make dies with them) and in
// one cgroup (so a teardown finds every process, shims and containers
// included). The machine's shell reaches kube-apiserver at the node's
// address through .cluster/kubeconfig.
//
// It owns the state directory (.cluster/ at the repository root) and its
// contract, read by tests outside the repository:
//
//	.cluster/kubeconfig   admin kubeconfig, works from the machine's shell
//	.cluster/images       lines name=REF, each image loaded into containerd
//	.cluster/ready        written last, once the node and its add-ons are Ready
//
// At exit, and at the next start after a SIGKILL, it removes every process,
// mount, cgroup, namespace and file it made and restores the sysctls the
// kubelet changes.
//
// It imports test/controlplane (etcd, kube-apiserver and the controller
// manager) and nothing else of the module; nothing may import it.
package main
