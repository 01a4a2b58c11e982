package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProxyLease is an exclusive, time-limited lease on one proxy of the fleet.
// Creating one acquires a proxy whose attributes match spec.selector in the
// lease's namespace; the proxy is named in status. Updating a lease (for
// example patching spec.ttlSeconds) renews it for spec.ttlSeconds from now;
// deleting it releases the proxy. The lease disappears by itself when it
// expires.
//
// +genclient
// +genclient:method=Report,verb=create,subresource=report,input=ProxyLeaseReport,result=k8s.io/apimachinery/pkg/apis/meta/v1.Status
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ProxyLease struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. Leave name empty (or set generateName) to get a
	// server-generated name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the crawler asks for.
	// +optional
	Spec ProxyLeaseSpec `json:"spec,omitempty"`
	// Status is the granted proxy and the lease's times, set by the server.
	// +optional
	Status ProxyLeaseStatus `json:"status,omitempty"`
}

// ProxyLeaseSpec is the request for a proxy. Only ttlSeconds may change after
// creation.
type ProxyLeaseSpec struct {
	// Selector picks proxies by their attributes (spec.attributes of the Proxy):
	// every key must be present with exactly this value. Empty matches every proxy
	// of the namespace.
	// +optional
	Selector map[string]string `json:"selector,omitempty"`
	// Selectors, instead of selector, is a ladder of proxy tiers, cheapest
	// first (at most 4): the lease is granted on the first tier that can
	// serve the target, and climbs to the next only when every proxy of a
	// tier cools for the target (after banned reports) or none is healthy —
	// not when the tier is merely busy. A SitePolicy may bound the target's
	// leases on each higher tier. status.tier says which one the lease got.
	// Immutable.
	// +optional
	// +listType=atomic
	Selectors []map[string]string `json:"selectors,omitempty"`
	// Target is the site the crawler will fetch through the proxy (a host name,
	// for example "example.com"). Proxies cooling down for this target after a
	// rate_limited or banned report are skipped. Immutable.
	// +optional
	Target string `json:"target,omitempty"`
	// TTLSeconds is how long the lease lasts from its creation, or from its last
	// update: changing it (or updating the lease at all) renews the lease for
	// this many seconds from now. Defaults to 300; at most the server's
	// --max-lease-ttl.
	// +optional
	TTLSeconds *int32 `json:"ttlSeconds,omitempty"`
	// WaitSeconds is how long creation may wait for a free proxy when none is
	// free right now. 0 (the default) answers at once.
	// +optional
	WaitSeconds int32 `json:"waitSeconds,omitempty"`
	// Priority is the priority band of a waiting request: higher bands are served
	// first. Defaults to 0. Any user may ask for -10 to 0; above 0 only as far
	// as the operator's --lease-max-priority grants the user or one of its
	// groups. Immutable.
	// +optional
	Priority int32 `json:"priority,omitempty"`
}

// ProxyLeaseStatus is the granted lease.
type ProxyLeaseStatus struct {
	// LeaseID is the store's identifier of this lease; the HTTP discovery API
	// (/v1/leases/{id}) knows the lease by it.
	// +optional
	LeaseID string `json:"leaseID,omitempty"`
	// Proxy is the leased proxy. It is always a Proxy of the lease's namespace.
	// +optional
	Proxy *LeasedProxy `json:"proxy,omitempty"`
	// HolderIdentity is the authenticated user who created the lease
	// ("http:" + the token's identity for a lease of the HTTP API; a user
	// whose name begins with "http:" or "kubernetes:" is shown with
	// "kubernetes:" in front, so that no user passes for a token).
	// +optional
	HolderIdentity string `json:"holderIdentity,omitempty"`
	// AcquireTime is when the proxy was granted.
	// +optional
	AcquireTime *metav1.Time `json:"acquireTime,omitempty"`
	// ExpireTime is when the lease ends unless it is renewed or released first.
	// +optional
	ExpireTime *metav1.Time `json:"expireTime,omitempty"`
	// LastResult is the result of the most recent report on this lease.
	// +optional
	LastResult ReportResult `json:"lastResult,omitempty"`
	// Tier is the tier of spec.selectors the lease was granted on: 0 the
	// first selector (or a lease without a ladder), 1 the second.
	// +optional
	Tier int32 `json:"tier,omitempty"`
	// Credentials are what the leased proxy asks for (HTTP Basic in
	// Proxy-Authorization; proxy.url carries them as userinfo). The proxy
	// refuses (407) a request without them, after they expire, and within
	// 30 seconds after the lease is deleted. A renewal (a new
	// spec.ttlSeconds) brings new ones. Absent for an External proxy, which
	// checks none.
	// +optional
	Credentials *ProxyCredentials `json:"credentials,omitempty"`
	// Conditions: ProxyHealthy says whether the leased proxy passes its
	// health probes now (False: move to another proxy or wait).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConditionProxyHealthy is the condition type of the leased proxy's health,
// with reason ReasonProxyHealthy or ReasonProxyUnhealthy.
const (
	ConditionProxyHealthy = "ProxyHealthy"
	ReasonProxyHealthy    = "ProbesSucceed"
	ReasonProxyUnhealthy  = "ProbesFail"
)

// ConditionProxyDraining is present while the leased proxy's ProxyPool
// removes it (status True, reason ReasonPoolScaleDown): the lease renews as
// usual until deleted (or the pool's drain timeout passes).
const (
	ConditionProxyDraining = "ProxyDraining"
	ReasonPoolScaleDown    = "PoolScaleDown"
)

// LeasedProxy describes the proxy a lease grants.
type LeasedProxy struct {
	// Name is the name of the Proxy object (in the lease's namespace).
	Name string `json:"name"`
	// URL is the proxy URL to configure in the crawler's HTTP client, with
	// the lease's credentials as userinfo, for example
	// "http://user:password@10.0.0.7:3128".
	URL string `json:"url"`
	// Host is the proxy's address (IP or host name).
	// +optional
	Host string `json:"host,omitempty"`
	// Port is the proxy's TCP port.
	// +optional
	Port int32 `json:"port,omitempty"`
	// Attributes are the Proxy's attributes (what the selector matched).
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`
	// LatencyMillis is the proxy's last measured probe latency.
	// +optional
	LatencyMillis *int64 `json:"latencyMillis,omitempty"`
}

// ProxyCredentials are a lease's credentials for its proxy.
type ProxyCredentials struct {
	// Username is a handle of the lease.
	Username string `json:"username"`
	// Password is signed for this lease and proxy, valid until ExpireTime.
	Password string `json:"password"`
	// ExpireTime is when the proxy stops accepting them: the lease's
	// expiry when they were issued, rounded up to the second.
	// +optional
	ExpireTime *metav1.Time `json:"expireTime,omitempty"`
}

// ProxyLeaseList is a list of ProxyLeases.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ProxyLeaseList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the leases.
	Items []ProxyLease `json:"items"`
}

// ReportResult is what a crawler observed while using a leased proxy.
type ReportResult string

const (
	// ResultOK means the target answered normally.
	ResultOK ReportResult = "ok"
	// ResultRateLimited means the target rate-limited the proxy (for example
	// HTTP 429); the (proxy, target) pair cools down.
	ResultRateLimited ReportResult = "rate_limited"
	// ResultBanned means the target blocked the proxy; the pair cools down.
	ResultBanned ReportResult = "banned"
)

// ProxyLeaseReport tells the server how a leased proxy fared against a target.
// It is created as the subresource proxyleases/{name}/report (like a Pod
// eviction) and answered with a Status; nothing is stored. A lease that expired
// less than one cooldown window ago still accepts reports.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ProxyLeaseReport struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata; name, if set, must be the lease's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Result is one of ok, rate_limited, banned.
	Result ReportResult `json:"result"`
	// Target is the site the result is about. Defaults to the lease's
	// spec.target; a rate_limited or banned report needs one or the other
	// (a proxy is never cooled for every site).
	// +optional
	Target string `json:"target,omitempty"`
}
