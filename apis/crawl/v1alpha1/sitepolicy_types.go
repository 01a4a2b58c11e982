package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SitePolicy condition types and reasons.
const (
	// ConditionApplied is True when the lease store applies the policy to
	// every site it names.
	ConditionApplied = "Applied"
	ReasonApplied    = "Applied"
	// ReasonSiteTaken: another SitePolicy (first by name) already names one
	// of its sites; the policy applies to the others.
	ReasonSiteTaken = "SiteTaken"
	// ReasonInvalid: the store refused the policy as a whole.
	ReasonInvalid = "Invalid"
)

// SitePolicySpec is one site's budget, shared by every tenant that crawls it.
// +kubebuilder:validation:XValidation:rule="self.minConcurrency <= self.maxConcurrency",message="spec.minConcurrency must not exceed spec.maxConcurrency",fieldPath=".minConcurrency"
// +kubebuilder:validation:XValidation:rule="!has(self.higherTiers) || self.higherTiers.all(t, t.maxConcurrency <= self.maxConcurrency)",message="spec.higherTiers[*].maxConcurrency must not exceed spec.maxConcurrency",fieldPath=".higherTiers"
type SitePolicySpec struct {
	// sites are the hosts the policy covers: "example.com" (that host only)
	// or "*.example.com" (every host under example.com, not example.com
	// itself); lowercase, without scheme, port or path. A host two policies
	// name belongs to the first by name.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=set
	// +required
	Sites []string `json:"sites"`

	// maxConcurrency is the most leases for the sites live at once, every
	// tenant, door and gateway together: the ceiling the adapted limit
	// grows back to.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +required
	MaxConcurrency int32 `json:"maxConcurrency"`

	// minConcurrency is the floor the limit is never cut below. Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MinConcurrency int32 `json:"minConcurrency,omitempty"`

	// maxGrantsPerSecond bounds the new leases for the sites a second, in
	// bursts of at most max(1, this): the ceiling the adapted rate grows
	// back to. Unset: no bound until the first cut, then the adapted rate.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxGrantsPerSecond *int32 `json:"maxGrantsPerSecond,omitempty"`

	// increaseIntervalSeconds is how long the bounds stand after a change
	// before they may grow by a step (each by half of its last cut, the
	// limit by at least one), when the sites used them in full and nothing
	// cut them meanwhile. Defaults to 2.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	IncreaseIntervalSeconds int32 `json:"increaseIntervalSeconds,omitempty"`

	// decreasePercent is what a cut keeps, in percent, on a rate_limited or
	// banned report for the sites: the new limit is this share of the limit,
	// the new rate this share of the grants of the last second (what the
	// sites were taking). Once per signal: a report on a lease granted
	// before the last cut, or within a second after it, does not cut again.
	// Defaults to 90.
	// +kubebuilder:default=90
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	DecreasePercent int32 `json:"decreasePercent,omitempty"`

	// minProxyIntervalMillis is the least time between two grants of one
	// proxy for the sites, in milliseconds (0, the default: none): a proxy
	// granted for them is not granted for them again, to anyone, before it
	// passes, so that no one address hits the sites more often.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600000
	// +optional
	MinProxyIntervalMillis int32 `json:"minProxyIntervalMillis,omitempty"`

	// higherTiers bound the sites' leases on the higher tiers of a ladder
	// (a lease request's prioritized selectors, cheap first: a lease climbs
	// to the next selector only when every proxy of the one before cools
	// for the site, docs/sites.md). higherTiers[0] bounds the leases
	// granted on a request's second selector, higherTiers[1] its third,
	// higherTiers[2] its fourth; a tier past the list is bounded by the
	// limit alone. Every tier's leases count against the limit too.
	// +kubebuilder:validation:MaxItems=3
	// +listType=atomic
	// +optional
	HigherTiers []SiteTier `json:"higherTiers,omitempty"`
}

// SiteTier is the sites' budget on one higher tier of a ladder.
type SiteTier struct {
	// maxConcurrency is the most leases for the sites live at once on the
	// tier (0: the sites never climb to it).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +required
	MaxConcurrency int32 `json:"maxConcurrency"`
}

// SitePolicyStatus is the budget as the replica that serves leases keeps it.
type SitePolicyStatus struct {
	// limit is the leases the sites may have live now (between
	// minConcurrency and maxConcurrency); live those they have.
	// +optional
	Limit int32 `json:"limit"`
	// +optional
	Live int32 `json:"live"`

	// grantsPerSecond is the new leases a second the sites may take now
	// (unset: no bound yet).
	// +optional
	GrantsPerSecond *resource.Quantity `json:"grantsPerSecond,omitempty"`

	// rateLimitedPercent is the share of the sites' leases over the last
	// 30–60 s that were reported rate_limited or banned, in percent.
	// +optional
	RateLimitedPercent int32 `json:"rateLimitedPercent"`

	// cuts counts the limit's cuts since the serving replica started.
	// +optional
	Cuts int64 `json:"cuts"`

	// tier is the ladder's tier of the newest lease granted for the sites:
	// 0 the first selector of its request (or a request without a ladder),
	// 1 the second. It shows when the sites' leases have climbed.
	// +optional
	Tier int32 `json:"tier"`

	// tierLive is the leases live on each tier, from the first, up to the
	// highest with a budget or a live lease; absent while only the first
	// has any.
	// +listType=atomic
	// +optional
	TierLive []int32 `json:"tierLive,omitempty"`

	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Applied.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SitePolicy is a site's budget for the whole fleet: how many leases for
// its sites may be live at once and how fast new ones are granted, adapted
// to what crawlers report (docs/sites.md). Cluster-scoped: a site's budget
// is one, whoever crawls it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=sitepolicies,singular=sitepolicy,scope=Cluster,shortName=sp,categories=crawl
// +kubebuilder:printcolumn:name="Sites",type=string,JSONPath=`.spec.sites`,description="Hosts the policy covers"
// +kubebuilder:printcolumn:name="Limit",type=integer,JSONPath=`.status.limit`,description="Leases the sites may have live now"
// +kubebuilder:printcolumn:name="Live",type=integer,JSONPath=`.status.live`,description="Leases for the sites live now"
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxConcurrency`,description="The ceiling"
// +kubebuilder:printcolumn:name="Rate",type=string,JSONPath=`.status.grantsPerSecond`,description="New leases a second the sites may take now"
// +kubebuilder:printcolumn:name="Limited%",type=integer,JSONPath=`.status.rateLimitedPercent`,description="Share of recent leases reported rate_limited or banned"
// +kubebuilder:printcolumn:name="Tier",type=integer,JSONPath=`.status.tier`,description="The ladder's tier of the newest lease (0: the first selector)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Cuts",type=integer,JSONPath=`.status.cuts`,priority=1,description="Cuts of the limit"
type SitePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SitePolicySpec `json:"spec"`
	// +optional
	Status SitePolicyStatus `json:"status,omitempty"`
}

// SitePolicyList is a list of SitePolicies.
// +kubebuilder:object:root=true
type SitePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SitePolicy `json:"items"`
}
