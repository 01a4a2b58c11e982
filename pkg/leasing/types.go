package leasing

import (
	"slices"
	"strings"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// The lease as the front doors see it. These are the store's own types,
// named here so that the doors import this package alone: the store already
// hands out copies, and a type of our own would copy every lease once more on
// each answer and each watch event.
type (
	// Lease is one granted lease, a copy.
	Lease = lease.Lease
	// ProxyInfo is a proxy as a lease shows it.
	ProxyInfo = lease.ProxyInfo
	// ProxyKey names a proxy (namespace and name).
	ProxyKey = lease.ProxyKey
	// Metadata is what a door keeps with a lease (labels, annotations and an
	// opaque Extra), returned with it and in every event.
	Metadata = lease.Metadata
	// Event is a change of one lease, in revision order (see Service.Watch).
	Event = lease.Event
	// EventType is Added, Modified or Deleted.
	EventType = lease.EventType
	// NoMatchCounts say why no proxy could take a lease (Error.Counts).
	NoMatchCounts = lease.NoMatchError
)

// Event types.
const (
	Added    = lease.Added
	Modified = lease.Modified
	Deleted  = lease.Deleted
)

// AnyHolder, as a holder, skips the holder check: the Kubernetes API, where
// RBAC decided who may act on a lease.
const AnyHolder = lease.AnyHolder

// ProxyInfoFromProxy is what a lease shows of a Proxy, as the store sees it
// (for a door that lists proxies from the informer's cache).
func ProxyInfoFromProxy(p *crawlv1alpha1.Proxy) ProxyInfo { return lease.ProxyInfoFromProxy(p) }

// HTTPHolderPrefix marks leases made over HTTP: the holder is
// "http:<identity>" and the default flow the same, so HTTP identities never
// share a flow with Kubernetes users of the aggregated API.
const HTTPHolderPrefix = "http:"

// Identity is who asks for leases: Holder owns them (only it may renew,
// release, read or report on them through the HTTP API), and Flow is the
// fair-queue flow its waiting requests share.
type Identity struct {
	Holder, Flow string
	// Namespaces are the only namespaces the identity may lease in (an HTTP
	// token's scope); nil means every namespace (a Kubernetes user, whom
	// RBAC limits per namespace, and an unscoped token).
	Namespaces []string
	// Groups are a Kubernetes user's groups (PriorityGrants of a group).
	Groups []string
}

// MayUse reports whether the identity may lease in namespace ns.
func (id Identity) MayUse(ns string) bool {
	return id.Namespaces == nil || slices.Contains(id.Namespaces, ns)
}

// HTTPIdentity is the identity of an HTTP API token: holder
// "http:<identity>", flow the holder or, when the request names a flow,
// "http:<identity>/<flow>" (a token cannot join another identity's flow).
func HTTPIdentity(identity, flow string) Identity {
	holder := HTTPHolderPrefix + identity
	if flow == "" {
		return Identity{Holder: holder, Flow: holder}
	}
	return Identity{Holder: holder, Flow: holder + "/" + flow}
}

// kubernetesEscapePrefix starts the holder of a Kubernetes user whose name
// could pass for an HTTP holder (or for an escaped name).
const kubernetesEscapePrefix = "kubernetes:"

// holderOfFlow is the holder whose requests wait in flow: HTTPIdentity's
// "http:<identity>/<flow>" is held by "http:<identity>" (an identity is a
// DNS label: it has no '/'); every other flow is its holder's own
// (KubernetesIdentity, and HTTPIdentity without a flow).
func holderOfFlow(flow string) string {
	if strings.HasPrefix(flow, HTTPHolderPrefix) {
		holder, _, _ := strings.Cut(flow, "/")
		return holder
	}
	return flow
}

// KubernetesIdentity is the identity of a Kubernetes user of the ProxyLease
// API: the user name is both holder and flow, except that a name beginning
// with "http:" (or "kubernetes:") gets "kubernetes:" in front, so that no
// Kubernetes user shares an HTTP token's holder or flows. The mapping is
// one-to-one: a holder beginning with "kubernetes:" comes only from such a
// name, and no Kubernetes holder begins with "http:".
func KubernetesIdentity(user string) Identity {
	if strings.HasPrefix(user, HTTPHolderPrefix) || strings.HasPrefix(user, kubernetesEscapePrefix) {
		user = kubernetesEscapePrefix + user
	}
	return Identity{Holder: user, Flow: user}
}
