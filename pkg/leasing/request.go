package leasing

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Request asks the service for one lease.
type Request struct {
	// Namespace restricts the proxies to one namespace ("" = any: only the
	// HTTP API offers that).
	Namespace string
	// Name names the lease (the Kubernetes API's metadata.name), unique
	// among the namespace's live leases; empty: the ID, after NamePrefix.
	Name string
	// NamePrefix, with Name empty, names the lease NamePrefix + its signed
	// ID (the Kubernetes API's generateName).
	NamePrefix string
	// Selector must be a subset of a proxy's attributes.
	Selector map[string]string
	// Selectors, instead of Selector, is a ladder of tiers, cheapest first
	// (pkg/lease's AcquireRequest.Selectors).
	Selectors []map[string]string
	// Target is the site the lease is for; proxies cooling for it are
	// skipped.
	Target string
	// TTL of the lease (0: the default).
	TTL time.Duration
	// Identity is who asks (HTTPIdentity, KubernetesIdentity).
	Identity Identity
	// Meta is kept with the lease.
	Meta Metadata
	// Wait is how long the request may wait for capacity (0: answer now).
	Wait time.Duration
	// Priority picks the queue's band (higher first).
	Priority int
}

// acquireRequest is the store's form of r.
func (r Request) acquireRequest() lease.AcquireRequest {
	return lease.AcquireRequest{
		Namespace: r.Namespace, Name: r.Name, NamePrefix: r.NamePrefix,
		Selector: r.Selector, Selectors: r.Selectors, Target: r.Target, TTL: r.TTL,
		Holder: r.Identity.Holder, Flow: r.Identity.Flow, Meta: r.Meta,
		// Without a namespace: any of the identity's.
		Namespaces: r.Identity.Namespaces,
	}
}

// Validate checks the request's shape, the same for both lease APIs: the
// namespace (a DNS label, when set), the selector and the target by the
// ProxyLease API's own rules (apis/leasing/v1alpha1), so that a lease taken
// over HTTP is always a valid ProxyLease. Paths are relative to the request
// ("namespace", "selector", "selectors", "target"). The server's bounds (the longest TTL
// and wait) are the Service's to check.
func (r Request) Validate() field.ErrorList {
	var errs field.ErrorList
	if r.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(r.Namespace) {
			errs = append(errs, field.Invalid(field.NewPath("namespace"), r.Namespace, msg))
		}
	}
	errs = append(errs, leasingv1alpha1.ValidateSelectors(r.Selector, r.Selectors, nil)...)
	return append(errs, leasingv1alpha1.ValidateTarget(r.Target, field.NewPath("target"))...)
}

// ValidateSelector checks a selector as Validate does, for a front door
// that filters by one (the HTTP proxy list's attr.K=V query).
func ValidateSelector(sel map[string]string, path *field.Path) field.ErrorList {
	return leasingv1alpha1.ValidateSelector(sel, path)
}
