package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProxyMode says who runs the proxy behind a Proxy object.
// +kubebuilder:validation:Enum=Managed;External
type ProxyMode string

const (
	// ModeManaged: the operator creates, replaces and deletes the proxy
	// instance through spec.provider.
	ModeManaged ProxyMode = "Managed"
	// ModeExternal: the proxy already runs at spec.endpoint; the operator only
	// health-checks it and hands it out.
	ModeExternal ProxyMode = "External"
)

// ProxyPhase is the one-word summary of a Proxy's state shown by kubectl.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Unhealthy;Failed;Deleting
type ProxyPhase string

const (
	// PhasePending: not reconciled yet.
	PhasePending ProxyPhase = "Pending"
	// PhaseProvisioning: the provider is creating (or replacing) the instance.
	PhaseProvisioning ProxyPhase = "Provisioning"
	// PhaseReady: provisioned and passing health checks.
	PhaseReady ProxyPhase = "Ready"
	// PhaseUnhealthy: provisioned but failing health checks.
	PhaseUnhealthy ProxyPhase = "Unhealthy"
	// PhaseFailed: a permanent error; the operator waits for a spec edit.
	PhaseFailed ProxyPhase = "Failed"
	// PhaseDeleting: the object is being deleted and its instance torn down.
	PhaseDeleting ProxyPhase = "Deleting"
)

// Condition types.
const (
	// ConditionProvisioned is True once the proxy instance exists and has an
	// address (always True for External proxies).
	ConditionProvisioned = "Provisioned"
	// ConditionHealthy is True while health checks through the proxy pass.
	ConditionHealthy = "Healthy"
	// ConditionReady summarises the phase for `kubectl wait
	// --for=condition=Ready`: True exactly when the phase is Ready; its
	// reason is the phase otherwise.
	ConditionReady = "Ready"
)

// Condition reasons.
const (
	ReasonProvisioning     = "Provisioning"
	ReasonCreated          = "Created"
	ReasonReplacing        = "Replacing"
	ReasonDeleting         = "Deleting"
	ReasonExternalEndpoint = "ExternalEndpoint"
	ReasonQuotaExceeded    = "QuotaExceeded"
	ReasonPermanentError   = "PermanentError"
	ReasonCloudInitError   = "CloudInitError"
	ReasonProviderError    = "ProviderError"
	ReasonInstanceStopped  = "InstanceStopped"
	// ReasonCreateFailed: the provider accepted a create, then the instance
	// never came up (Compute Engine failed the operation later: quota, zone
	// capacity). Retried with backoff.
	ReasonCreateFailed   = "CreateFailed"
	ReasonProbeSucceeded = "ProbeSucceeded"
	ReasonProbeFailed    = "ProbeFailed"
)

const (
	// FinalizerName guards Managed proxies until their instance is deleted.
	FinalizerName = "crawl.example.com/finalizer"
	// SpecHashAnnotation records the hash of the spec (and resolved
	// cloud-init) the current instance was created from.
	SpecHashAnnotation = "crawl.example.com/spec-hash"
	// CloudInitSecretLabel must be "true" on every Secret referenced by
	// spec.cloudInit.secretRef: the operator caches only labelled Secrets.
	CloudInitSecretLabel = "crawl.example.com/cloud-init"
	// ProxyPort is the port Managed proxy instances listen on, and the
	// default of spec.endpoint.port.
	ProxyPort = 3128
)

// Defaults the CRD applies (kept equal to the +kubebuilder:default markers
// below by a test on the generated CRD). Go code that builds a Proxy without
// going through the apiserver can use HealthCheck.WithDefaults.
const (
	// DefaultHealthCheckURL is probed through the proxy when spec.healthCheck.url
	// is unset. example.com is reserved for exactly this kind of use (RFC 2606),
	// answers a plain GET with 200, and plain http keeps the default probe to
	// the proxy's simplest path; set an https URL to exercise CONNECT.
	DefaultHealthCheckURL              = "http://example.com/"
	DefaultHealthCheckIntervalSeconds  = 30
	DefaultHealthCheckTimeoutSeconds   = 5
	DefaultHealthCheckSuccessThreshold = 1
	DefaultHealthCheckFailureThreshold = 3
	DefaultHealthCheckExpectedStatus   = 200
	// DefaultCloudInitSecretKey is the Secret key read when
	// spec.cloudInit.secretRef.key is unset.
	DefaultCloudInitSecretKey = "userData"
)

// ProxySpec is the desired state of a Proxy.
//
// Cross-field rules are CEL rules on this type, each message naming the field.
// +kubebuilder:validation:XValidation:rule="self.mode != 'Managed' || has(self.provider)",message="spec.provider is required when spec.mode is Managed",fieldPath=".provider",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Managed' || !has(self.endpoint)",message="spec.endpoint is forbidden when spec.mode is Managed (the provider assigns the address)",fieldPath=".endpoint",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || has(self.endpoint)",message="spec.endpoint is required when spec.mode is External",fieldPath=".endpoint",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || !has(self.provider)",message="spec.provider is forbidden when spec.mode is External",fieldPath=".provider",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || !has(self.cloudInit)",message="spec.cloudInit is forbidden when spec.mode is External",fieldPath=".cloudInit",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || !has(self.kubernetes)",message="spec.kubernetes is forbidden when spec.mode is External",fieldPath=".kubernetes",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="self.mode != 'External' || !has(self.gcp)",message="spec.gcp is forbidden when spec.mode is External",fieldPath=".gcp",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.kubernetes) || (has(self.provider) && self.provider == 'kubernetes')",message="spec.kubernetes is only allowed when spec.provider is kubernetes",fieldPath=".kubernetes",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.gcp) || (has(self.provider) && self.provider == 'gcp')",message="spec.gcp is only allowed when spec.provider is gcp",fieldPath=".gcp",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.provider) || self.provider != 'gcp' || has(self.gcp)",message="spec.gcp is required when spec.provider is gcp (zone, machineType and image have no defaults)",fieldPath=".gcp",reason="FieldValueRequired"
type ProxySpec struct {
	// mode says who runs the proxy: Managed (the operator provisions it
	// through spec.provider) or External (it already runs at spec.endpoint).
	// Defaults to Managed.
	// +kubebuilder:default=Managed
	// +optional
	Mode ProxyMode `json:"mode,omitempty"`

	// provider names the registered provider that runs a Managed proxy, e.g.
	// "kubernetes" or "gcp". Required for Managed, forbidden for External.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Provider string `json:"provider,omitempty"`

	// attributes are free-form properties (region, tier, ...) that lease
	// selectors match on. Keys and values follow the rules of label names and
	// values without a prefix: at most 63 characters of alphanumerics, '-',
	// '_' and '.', starting and ending with an alphanumeric.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="spec.attributes keys must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
	// +optional
	Attributes map[string]AttributeValue `json:"attributes,omitempty"`

	// cloudInit is the cloud-init user data a Managed instance boots with,
	// given inline or by reference to a Secret. Forbidden for External.
	// +optional
	CloudInit *CloudInit `json:"cloudInit,omitempty"`

	// endpoint is where an External proxy listens. Required for External,
	// forbidden for Managed (the provider assigns the address).
	// +optional
	Endpoint *Endpoint `json:"endpoint,omitempty"`

	// healthCheck configures the probes sent through the proxy. Every field
	// has a default, so an empty or absent healthCheck is valid.
	// +kubebuilder:default={}
	// +optional
	HealthCheck HealthCheck `json:"healthCheck,omitempty"`

	// kubernetes holds options of the "kubernetes" provider (Squid pods in
	// this cluster). Only allowed when spec.provider is "kubernetes".
	// +optional
	Kubernetes *KubernetesProviderSpec `json:"kubernetes,omitempty"`

	// gcp holds options of the "gcp" provider (Compute Engine VMs). Required
	// when spec.provider is "gcp" and only allowed then.
	// +optional
	GCP *GCPProviderSpec `json:"gcp,omitempty"`
}

// AttributeValue and GCPLabelValue are aliases of string, so Attributes and
// Labels stay plain map[string]string in Go; they exist only to carry the
// schema of map values (controller-gen has no marker for map values, and a CEL
// rule over unbounded values exceeds the apiserver's cost budget).
// hack/update-codegen.sh runs controller-gen with GODEBUG=gotypesalias=0,
// without which its deepcopy generator rejects alias map values.

// AttributeValue is the value of one attribute: at most 63 alphanumerics,
// '-', '_' or '.', starting and ending with an alphanumeric, or empty.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
type AttributeValue = string

// GCPLabelValue is the value of one GCP label: at most 63 lowercase letters,
// digits, '-' or '_'.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[-_a-z0-9]*$`
type GCPLabelValue = string

// CloudInit is cloud-init user data, inline or from a Secret; exactly one of
// userData and secretRef is set.
// +kubebuilder:validation:XValidation:rule="has(self.userData) != has(self.secretRef)",message="spec.cloudInit must set exactly one of spec.cloudInit.userData or spec.cloudInit.secretRef"
type CloudInit struct {
	// userData is the cloud-init document itself.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262144
	// +optional
	UserData string `json:"userData,omitempty"`

	// secretRef points at a Secret in the Proxy's namespace holding the
	// cloud-init document. The Secret must carry the label
	// crawl.example.com/cloud-init: "true", or the operator cannot see it.
	// Editing the Secret replaces the instance.
	// +optional
	SecretRef *SecretKeyRef `json:"secretRef,omitempty"`
}

// SecretKeyRef selects one key of a Secret in the Proxy's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// key within the Secret's data. Defaults to userData.
	// +kubebuilder:default=userData
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// Endpoint is the address of an External proxy.
type Endpoint struct {
	// host is a DNS name or an IP address.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="isIP(self) || self.matches('^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$')",message="spec.endpoint.host must be a DNS name or an IP address"
	// +required
	Host string `json:"host"`

	// port the proxy listens on. Defaults to 3128.
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// HealthCheck configures the probes the operator sends through the proxy. A
// probe succeeds when the request through the proxy answers expectedStatus
// within timeoutSeconds; the Healthy condition flips after successThreshold
// successes or failureThreshold failures in a row.
//
// The has() guards matter only for the {} default, which the apiserver
// validates before its children are defaulted; stored objects always carry both.
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutSeconds) || !has(self.intervalSeconds) || self.timeoutSeconds <= self.intervalSeconds",message="spec.healthCheck.timeoutSeconds (default 5) must not exceed spec.healthCheck.intervalSeconds: with an interval under 5 seconds, set timeoutSeconds too",fieldPath=".timeoutSeconds"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || (isURL(self.url) && url(self.url).getScheme() == 'https')",message="spec.healthCheck.tls is only allowed when spec.healthCheck.url is an https URL",fieldPath=".tls",reason="FieldValueForbidden"
type HealthCheck struct {
	// url is fetched through the proxy: plain http as a forwarded GET, https
	// through a CONNECT tunnel with TLS inside. Defaults to http://example.com/.
	// +kubebuilder:default="http://example.com/"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="spec.healthCheck.url must be an absolute http or https URL with a host"
	// +optional
	URL string `json:"url,omitempty"`

	// intervalSeconds is the time between two probes of this proxy. Defaults to 30.
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	IntervalSeconds int32 `json:"intervalSeconds,omitempty"`

	// timeoutSeconds bounds one probe; it must not exceed intervalSeconds
	// (a proxy is never probed twice at once). Defaults to 5: set it with an
	// intervalSeconds under 5.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3599
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// successThreshold is how many successful probes in a row turn an
	// unhealthy (or never checked) proxy healthy. Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	SuccessThreshold int32 `json:"successThreshold,omitempty"`

	// failureThreshold is how many failed probes in a row turn a healthy (or
	// never checked) proxy unhealthy. Defaults to 3.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	FailureThreshold int32 `json:"failureThreshold,omitempty"`

	// expectedStatus is the HTTP status code a successful probe answers.
	// Defaults to 200.
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=599
	// +optional
	ExpectedStatus int32 `json:"expectedStatus,omitempty"`

	// tls configures verification of an https url; only allowed with one.
	// +optional
	TLS *HealthCheckTLS `json:"tls,omitempty"`
}

// HealthCheckTLS configures how an https health-check URL is verified.
// +kubebuilder:validation:XValidation:rule="!(has(self.insecureSkipVerify) && self.insecureSkipVerify) || !has(self.caBundle)",message="spec.healthCheck.tls.caBundle must not be set when spec.healthCheck.tls.insecureSkipVerify is true",fieldPath=".caBundle",reason="FieldValueForbidden"
type HealthCheckTLS struct {
	// insecureSkipVerify skips verification of the target's certificate.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`

	// serverName overrides the name the target's certificate is checked
	// against (default: the url's host).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$`
	// +optional
	ServerName string `json:"serverName,omitempty"`

	// caBundle is PEM-encoded CA certificates trusted instead of the system
	// roots.
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:XValidation:rule="self.contains('-----BEGIN CERTIFICATE-----')",message="spec.healthCheck.tls.caBundle must hold PEM-encoded certificates"
	// +optional
	CABundle string `json:"caBundle,omitempty"`
}

// KubernetesProviderSpec holds options of the "kubernetes" provider, which
// runs the proxy as a Squid pod in the operator's cluster.
type KubernetesProviderSpec struct {
	// image of the Squid container (default: the provider's pinned image).
	// Any other image than the pinned one and the operator's
	// --kubernetes-pod-image must be listed in its
	// --kubernetes-allowed-images, or the Proxy fails (Provisioned=False).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// nodeName pins the pod to one node, bypassing the scheduler: refused
	// (Provisioned=False) unless the operator runs with
	// --kubernetes-allow-proxy-node-name.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// GCPProviderSpec holds options of the "gcp" provider, which runs the proxy on
// a Compute Engine VM. zone, machineType and image are required: defaulting
// them would silently create billable VMs of an arbitrary shape.
type GCPProviderSpec struct {
	// project is the GCP project ID (default: the provider's configured project).
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z][-a-z0-9.:]*[a-z0-9]$`
	// +optional
	Project string `json:"project,omitempty"`

	// zone the VM runs in, e.g. us-central1-a.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z][-a-z0-9]*[a-z0-9]$`
	// +required
	Zone string `json:"zone"`

	// machineType is the machine type name within the zone, e.g. e2-small.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z][-a-z0-9]*[a-z0-9]$`
	// +required
	MachineType string `json:"machineType"`

	// image is the boot disk's source image, e.g.
	// projects/debian-cloud/global/images/family/debian-12.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Image string `json:"image"`

	// network is the VPC network (name or URL; default: the project's default network).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Network string `json:"network,omitempty"`

	// subnetwork within network (name or URL).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Subnetwork string `json:"subnetwork,omitempty"`

	// tags are network tags, e.g. for firewall rules.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	Tags []string `json:"tags,omitempty"`

	// labels are added to the VM beside the operator's own ownership labels.
	// GCP rules: keys start with a lowercase letter, keys and values are at
	// most 63 lowercase letters, digits, '-' or '_'.
	// +kubebuilder:validation:MaxProperties=60
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z][-_a-z0-9]{0,62}$'))",message="spec.gcp.labels keys must start with a lowercase letter and have at most 63 lowercase letters, digits, '-' or '_'"
	// +optional
	Labels map[string]GCPLabelValue `json:"labels,omitempty"`

	// spot runs the VM as a Spot VM (cheaper, may be preempted; the operator
	// replaces a stopped instance).
	// +optional
	Spot bool `json:"spot,omitempty"`
}

// ProxyStatus is the observed state of a Proxy, written only by the operator.
type ProxyStatus struct {
	// phase summarises the state: Pending, Provisioning, Ready, Unhealthy,
	// Failed or Deleting.
	// +optional
	Phase ProxyPhase `json:"phase,omitempty"`

	// providerID identifies the instance at its provider.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	ProviderID string `json:"providerID,omitempty"`

	// ip is the address the proxy is reached at (the endpoint host for External).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	IP string `json:"ip,omitempty"`

	// probedURL is the proxy URL the Healthy condition is about. A verdict
	// does not follow the proxy to another address: while probedURL is not
	// the proxy's URL, it is not leased out, until a probe through the new
	// address passes. Empty on objects an older operator wrote (their
	// condition is trusted until the next verdict).
	// +kubebuilder:validation:MaxLength=300
	// +optional
	ProbedURL string `json:"probedURL,omitempty"`

	// latencyMillis is the last reported probe latency through the proxy, in
	// milliseconds.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LatencyMillis *int64 `json:"latencyMillis,omitempty"`

	// lastHealthCheckTime is the time of the last probe that changed status
	// (a verdict flip or a significant latency change), not of every probe.
	// +optional
	LastHealthCheckTime *metav1.Time `json:"lastHealthCheckTime,omitempty"`

	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Provisioned (the instance exists and has its address),
	// Healthy (the probes through it succeed) and Ready (the phase is Ready:
	// for kubectl wait --for=condition=Ready).
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// Proxy is one forward proxy of the fleet: Managed (the operator runs it
// through a provider) or External (it runs elsewhere; the operator only
// health-checks it). Proxies are leased to crawlers by their attributes.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=proxies,singular=proxy,scope=Namespaced,shortName=px,categories=crawl
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Summary of the proxy's state"
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.ip`,description="Address the proxy is reached at"
// +kubebuilder:printcolumn:name="Latency",type=integer,JSONPath=`.status.latencyMillis`,description="Last reported probe latency through the proxy, in milliseconds"
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`,description="Provider running a Managed proxy"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`,priority=1,description="Managed or External"
// +kubebuilder:printcolumn:name="Provider ID",type=string,JSONPath=`.status.providerID`,priority=1,description="Instance at the provider"
type Proxy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec ProxySpec `json:"spec"`

	// status is the observed state, written by the operator.
	// +optional
	Status ProxyStatus `json:"status,omitempty"`
}

// ProxyList is a list of Proxy objects.
// +kubebuilder:object:root=true
type ProxyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Proxy `json:"items"`
}
