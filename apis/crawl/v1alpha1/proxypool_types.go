package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of pooled Proxies.
const (
	// PoolLabel names the ProxyPool a Proxy belongs to (with an owner
	// reference): the pool's selector.
	PoolLabel = "crawl.example.com/pool"
	// DrainingAnnotation is set on a pooled Proxy the pool is removing while
	// it still has leases: its value is when the drain began (RFC 3339).
	// The lease store grants a draining Proxy no new lease; its holders see
	// it on their lease, and it is deleted once its leases end or the drain
	// timeout passes.
	DrainingAnnotation = "crawl.example.com/draining"
	// TemplateHashLabel is the hash of the pool template a Proxy was made
	// from.
	TemplateHashLabel = "crawl.example.com/template-hash"
)

// ProxyPool condition types and reasons.
const (
	// ConditionScaled is True when the pool has its desired replicas and
	// none is draining.
	ConditionScaled = "Scaled"
	ReasonScaledUp  = "ScaledUp"
	ReasonScaling   = "Scaling"
	ReasonDraining  = "Draining"
	ReasonAtDesired = "AtDesired"
)

// Reasons of status.desiredReplicas (status.desiredReason).
const (
	// DesiredFixed: spec.replicas, no autoscaling.
	DesiredFixed = "Replicas"
	// DesiredDemand: autoscaling, from leases held and requests waiting.
	DesiredDemand = "Demand"
	// DesiredMin and DesiredMax: the demand clamped to the bounds.
	DesiredMin = "MinReplicas"
	DesiredMax = "MaxReplicas"
	// DesiredScaleDownDelay: demand fell, the pool holds its size until
	// spec.autoscaling.scaleDownDelaySeconds of low demand have passed.
	DesiredScaleDownDelay = "ScaleDownDelay"
)

// ProxyPoolSpec is the desired state of a ProxyPool.
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !has(self.autoscaling.minReplicas) || !has(self.autoscaling.maxReplicas) || self.autoscaling.minReplicas <= self.autoscaling.maxReplicas",message="spec.autoscaling.minReplicas must not exceed spec.autoscaling.maxReplicas",fieldPath=".autoscaling.minReplicas"
type ProxyPoolSpec struct {
	// replicas is how many Proxies the pool runs (the scale subresource:
	// `kubectl scale proxypool`). With autoscaling, the operator sets it.
	// Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// template is the Proxy each replica is made from.
	// +required
	Template ProxyTemplate `json:"template"`

	// strategy says how a template change rolls the pool.
	// +kubebuilder:default={}
	// +optional
	Strategy PoolStrategy `json:"strategy,omitempty"`

	// autoscaling sizes the pool from lease demand; absent, spec.replicas
	// is the size.
	// +optional
	Autoscaling *PoolAutoscaling `json:"autoscaling,omitempty"`
}

// ProxyTemplate is a Proxy without a name: the pool names its replicas.
type ProxyTemplate struct {
	// metadata of each replica: its labels (the pool adds its own).
	// +optional
	Metadata TemplateMetadata `json:"metadata,omitempty"`

	// spec of each replica; spec.attributes are what lease selectors match.
	// Pooled Proxies are Managed: the pool creates and deletes instances.
	// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode == 'Managed'",message="spec.template.spec.mode must be Managed: a pool creates and deletes its proxies' instances",fieldPath=".mode"
	// +required
	Spec ProxySpec `json:"spec"`
}

// TemplateMetadata is the part of a replica's metadata a template sets.
type TemplateMetadata struct {
	// labels of each replica.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// PoolStrategy bounds a rolling replacement after a template change.
// +kubebuilder:validation:XValidation:rule="!has(self.maxSurge) || !has(self.maxUnavailable) || self.maxSurge > 0 || self.maxUnavailable > 0",message="spec.strategy.maxSurge and spec.strategy.maxUnavailable must not both be 0",fieldPath=".maxSurge"
type PoolStrategy struct {
	// maxSurge is how many Proxies over replicas a roll may create.
	// Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxSurge *int32 `json:"maxSurge,omitempty"`

	// maxUnavailable is how many fewer than replicas may be Ready during a
	// roll. Defaults to 0.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty"`
}

// PoolAutoscaling sizes a pool from its lease demand.
type PoolAutoscaling struct {
	// minReplicas is the smallest size; 0 lets an idle pool scale to zero.
	// Defaults to 0.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// maxReplicas is the largest size.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +required
	MaxReplicas int32 `json:"maxReplicas"`

	// targetUtilization is the share of the pool's lease capacity to keep
	// in use, in percent (leases held plus requests waiting, over replicas
	// times leases per proxy). Defaults to 80.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	TargetUtilization *int32 `json:"targetUtilization,omitempty"`

	// scaleDownDelaySeconds is how long demand must stay low before the
	// pool shrinks. Defaults to 300.
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ScaleDownDelaySeconds *int32 `json:"scaleDownDelaySeconds,omitempty"`
}

// ProxyPoolStatus is the observed state of a ProxyPool.
type ProxyPoolStatus struct {
	// replicas is how many Proxies the pool owns (draining ones included).
	// +optional
	Replicas int32 `json:"replicas"`

	// readyReplicas is how many of them are phase Ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// leasedReplicas is how many of them hold at least one lease.
	// +optional
	LeasedReplicas int32 `json:"leasedReplicas"`

	// drainingReplicas is how many are being removed while still leased.
	// +optional
	DrainingReplicas int32 `json:"drainingReplicas"`

	// waitingRequests are the lease requests waiting now for a proxy this
	// pool's template could serve (what autoscaling grows it by).
	// +optional
	WaitingRequests int32 `json:"waitingRequests"`

	// desiredReplicas is the size the pool is heading for, and
	// desiredReason why (Replicas, Demand, MinReplicas, MaxReplicas,
	// ScaleDownDelay).
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
	// +optional
	DesiredReason string `json:"desiredReason,omitempty"`

	// selector is the label selector of the pool's Proxies, as a string
	// (the scale subresource's).
	// +optional
	Selector string `json:"selector,omitempty"`

	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Scaled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProxyPool runs a set of Proxies from one template, sized by hand
// (replicas, `kubectl scale`) or by lease demand (autoscaling), draining a
// leased Proxy before it removes it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:path=proxypools,singular=proxypool,scope=Namespaced,shortName=pxp,categories=crawl
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`,description="Size the pool is heading for"
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`,description="Proxies the pool owns"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`,description="Proxies phase Ready"
// +kubebuilder:printcolumn:name="Leased",type=integer,JSONPath=`.status.leasedReplicas`,description="Proxies holding a lease"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.desiredReason`,priority=1,description="Why desired is what it is"
// +kubebuilder:printcolumn:name="Draining",type=integer,JSONPath=`.status.drainingReplicas`,priority=1,description="Proxies draining before removal"
type ProxyPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ProxyPoolSpec `json:"spec"`
	// +optional
	Status ProxyPoolStatus `json:"status,omitempty"`
}

// ProxyPoolList is a list of ProxyPools.
// +kubebuilder:object:root=true
type ProxyPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyPool `json:"items"`
}
