// Package kubernetes is the "kubernetes" provider: each proxy instance is one
// Squid pod in the operator's own cluster, for local development and CI.
//
// It owns: the pod an instance becomes (buildPod, pure: pinned ubuntu/squid
// image, port 3128 named "proxy", the owner-UID and tag labels, cloud-init
// user data from a Secret as that Secret's volume and inline user data in the
// container's environment as UserDataEnv, a securityContext that passes Pod
// Security "restricted"), which images and nodes a Proxy may ask for
// (Options: --kubernetes-allowed-images, --kubernetes-allow-proxy-node-name),
// the
// providerID syntax "k8s://<namespace>/<name>", the mapping of pod phases to
// provider states, and the mapping of API errors to provider error classes.
//
// Instances are observed only by polling Get (the reconciler never watches
// pods). Hand New a client that reads from the API server, not from a
// manager's cache: a cached client would start a cluster-wide pod informer
// just for these reads.
//
// It also keeps the NetworkPolicy of its Squid pods in each namespace
// that has them (NetworkPolicy, owned by the pods), and writes into each
// pod's squid.conf where a lease's requests may go (proxyauth.Egress).
//
// Must not import: pkg/controller, pkg/metrics, or other providers. It
// imports pkg/provider (the contract), pkg/proxyauth (the Squid rules) and
// the API types only.
package kubernetes
