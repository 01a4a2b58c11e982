// Package nodeagent is a stand-in kubelet for the operator's Squid pods, so the
// whole system runs on one machine without a container runtime (tests, e2e and
// `make dev`).
//
// It owns: registering a Node and keeping its Lease fresh; taking the pods that
// carry the operator's tag label (those already on its node, and unscheduled
// ones when Options.Bind is set); running Debian's squid for each on its own
// loopback address 127.0.0.N with a config derived from the pod; writing the
// pod's status the way a kubelet does (Running with the pod IP, Failed when
// squid dies); stopping squid when the pod goes and confirming a graceful
// deletion with a grace-period-0 delete.
//
// It ignores the pod's image: the container is always the local squid binary.
// The cloud-init user data the kubernetes provider gives the container, inline
// in its environment (kubernetes.UserDataEnv, also passed to squid's
// environment) or as a Secret volume at kubernetes.UserDataDir (the agent
// reads the Secret, as a kubelet does), is written to
// <instance dir>/user-data, as the instance would receive it.
//
// With Options.Pods it also runs other pods as local processes (the
// operator's own, from its install manifests: test/e2e/ha): PodOptions says
// what such a pod gets and what differs from a kubelet. podnet.go is their
// network (pod IPs on 10.244.<node>.0/24, each listening at its
// 127.244.<node>.N), serviceproxy.go the kube-proxy and cluster DNS
// stand-in for Services with loopback ClusterIPs, podrunner.go scheduling
// (PickNode) and the pods' lifecycle, podproc.go one pod's process, its
// sandbox (mount and UTS namespaces), probes and status.
//
// Must not import: pkg/controller or anything that runs the operator; it talks
// to the cluster only through the API server, like a real kubelet.
package nodeagent
