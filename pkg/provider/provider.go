package provider

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// Provider runs proxy instances somewhere. The reconciler observes instances
// only by polling Get, so no method may block until an instance is ready.
//
// Every non-nil error a method returns must carry a class (wrap it with
// NotFound, QuotaExceeded, Permanent or Transient, or wrap one of the
// sentinels); the reconciler decides between waiting, failing and retrying
// with Class(err). An unclassified error is treated as transient.
//
// Implementations must be safe for concurrent use: the reconciler runs several
// workers and the garbage collector lists concurrently with them.
type Provider interface {
	// Create starts an instance for req and returns its providerID, an
	// opaque string this provider alone interprets.
	//
	// Create is idempotent by req.Name: if an instance of that name already
	// exists (whatever its state, tag or owner) Create returns nil and the
	// providerID of that instance; it never modifies it. Replacing an
	// instance is Delete, then poll Get until NotFound, then Create.
	//
	// Create returns as soon as the instance is requested; it must not wait
	// for StateRunning. An invalid request (see CreateRequest.Validate) is
	// ErrPermanent. Exhausted quota is ErrQuotaExceeded.
	Create(ctx context.Context, req CreateRequest) (providerID string, err error)

	// Get returns the current state of the instance providerID.
	//
	// A missing instance, including one whose deletion has completed and a
	// providerID this provider never issued, is an ErrNotFound-class error
	// and a nil *Instance. On success the Instance is non-nil, its
	// ProviderID equals providerID and its State is one of the known
	// states; StateRunning implies a non-empty IP.
	Get(ctx context.Context, providerID string) (*Instance, error)

	// Delete starts deleting the instance providerID and returns without
	// waiting for it to be gone (callers poll Get until NotFound).
	//
	// Deleting a missing instance, including one already being deleted, is
	// success: Delete never returns an ErrNotFound-class error.
	Delete(ctx context.Context, providerID string) error

	// ListByTag returns every instance of this provider created with
	// CreateRequest.Tag == tag, and only those, each with its Name, Tag,
	// OwnerUID, ProviderID, State and CreatedAt filled in. No instance is
	// an empty list and a nil error. The order is unspecified.
	//
	// A listing that could not read some scopes (a Compute Engine zone
	// that did not answer) returns the instances of the scopes it did read
	// together with an *IncompleteListError (ErrTransient-class) naming the
	// missing scopes: a caller that deletes what is not listed must treat
	// those scopes as unknown (see UnreachableScopes). Any other error
	// comes with no instances.
	ListByTag(ctx context.Context, tag string) ([]Instance, error)
}

// CreateRequest describes the instance to create.
type CreateRequest struct {
	// Name is the instance name, unique within the provider; the reconciler
	// passes NameFromUID(proxy.UID). Required; must match NamePattern and be
	// at most MaxNameLength characters.
	Name string
	// Tag marks the instance as managed by this operator deployment;
	// ListByTag(Tag) finds it. Required; normally DefaultTag.
	Tag string
	// OwnerUID is the UID of the Proxy that owns the instance. Required:
	// garbage collection deletes only instances carrying an owner UID.
	OwnerUID types.UID
	// Namespace is the namespace of the owning Proxy (providers that create
	// namespaced objects use it; others may ignore it).
	Namespace string
	// CloudInit is the resolved cloud-init user data, possibly empty.
	CloudInit string
	// CloudInitSecret, when set, is the Secret of Namespace that CloudInit
	// was read from: a provider that can mount it (kubernetes) references
	// it instead of copying the data into the instance's spec, where anyone
	// who may read that spec would read it.
	CloudInitSecret *SecretKeyRef
	// ProxyAuth is the configuration of the proxy's auth helper (JSON, see
	// pkg/proxyauth HelperConfig: it holds the proxy's own key), which the
	// provider hands to the instance where only it can read it (a Secret
	// volume, VM metadata). Empty: the instance checks no credentials.
	ProxyAuth []byte
	// Proxy is the owner's spec, for provider blocks and attributes. It may
	// be nil; providers must not modify it.
	Proxy *crawlv1alpha1.ProxySpec
	// SpecHash identifies the spec the instance is built from. Providers
	// store it on the instance (a label) and return it as Instance.SpecHash,
	// so that an instance found under its name after a crash can be told
	// apart from one of the current spec. Optional; at most
	// MaxSpecHashLength lowercase letters and digits.
	SpecHash string
}

// SecretKeyRef names one key of a Secret.
type SecretKeyRef struct {
	Name, Key string
}

// MaxSpecHashLength is the longest CreateRequest.SpecHash: what fits in a
// label value of every provider.
const MaxSpecHashLength = 63

var specHashPattern = regexp.MustCompile(`^[a-z0-9]*$`)

// MaxNameLength is the longest instance name: the limit of both a GCP resource
// name and a DNS-1123 label.
const MaxNameLength = 63

// NamePattern is the syntax of an instance name: a GCP resource name, which is
// also a DNS-1123 label (so a Pod name) that starts with a letter.
const NamePattern = `^[a-z]([-a-z0-9]*[a-z0-9])?$`

var namePattern = regexp.MustCompile(NamePattern)

// ValidName reports whether name is a legal instance name for every provider.
func ValidName(name string) bool {
	return len(name) <= MaxNameLength && namePattern.MatchString(name)
}

// Validate checks the fields every provider needs. The error is
// ErrPermanent-class and names the offending field, because retrying the same
// request cannot succeed.
func (r CreateRequest) Validate() error {
	switch {
	case r.Name == "":
		return Permanent(fmt.Errorf("createRequest.name: required"))
	case !ValidName(r.Name):
		return Permanent(fmt.Errorf("createRequest.name %q: must match %s and be at most %d characters", r.Name, NamePattern, MaxNameLength))
	case r.Tag == "":
		return Permanent(fmt.Errorf("createRequest.tag: required"))
	case r.OwnerUID == "":
		return Permanent(fmt.Errorf("createRequest.ownerUID: required"))
	case len(r.SpecHash) > MaxSpecHashLength || !specHashPattern.MatchString(r.SpecHash):
		return Permanent(fmt.Errorf("createRequest.specHash %q: at most %d lowercase letters and digits", r.SpecHash, MaxSpecHashLength))
	}
	return nil
}

// Instance is a provider's view of one instance.
type Instance struct {
	// ProviderID is the ID Create returned for this instance.
	ProviderID string
	// Name is CreateRequest.Name.
	Name string
	// Tag is CreateRequest.Tag.
	Tag string
	// OwnerUID is CreateRequest.OwnerUID, read back from the instance's
	// labels; garbage collection relies on it as ownership proof.
	OwnerUID types.UID
	// SpecHash is CreateRequest.SpecHash, read back from the instance;
	// empty for an instance created without one.
	SpecHash string
	// State is one of the InstanceState constants.
	State InstanceState
	// IP is the address proxies are reached at; empty until Running.
	IP string
	// CreatedAt is when the provider created the instance. Never zero:
	// garbage collection spares instances younger than a minimum age.
	CreatedAt time.Time
	// Scope is where the instance lives in the provider's own terms, in
	// the vocabulary of IncompleteListError.Unreachable (Compute Engine:
	// "projects/<p>/zones/<z>"); empty for providers without scopes.
	Scope string
}

// InstanceState is the lifecycle state of an instance as the reconciler sees
// it. Providers map their own states onto these; a state they do not know
// maps to StateStopped, whose answer (delete and recreate) is always safe.
type InstanceState string

const (
	// StateProvisioning: requested, not yet serving (no IP yet, booting).
	StateProvisioning InstanceState = "Provisioning"
	// StateRunning: serving at Instance.IP.
	StateRunning InstanceState = "Running"
	// StateStopped: exists but does not serve and will not recover alone.
	StateStopped InstanceState = "Stopped"
	// StateTerminated: gone or going away (deletion in progress).
	StateTerminated InstanceState = "Terminated"
)

// States returns every known InstanceState.
func States() []InstanceState {
	return []InstanceState{StateProvisioning, StateRunning, StateStopped, StateTerminated}
}

// Known reports whether s is one of the InstanceState constants.
func (s InstanceState) Known() bool {
	switch s {
	case StateProvisioning, StateRunning, StateStopped, StateTerminated:
		return true
	}
	return false
}

// Operation names, shared by the metrics decorator (the op label), the fake's
// call log and error injection.
const (
	OpCreate = "create"
	OpGet    = "get"
	OpDelete = "delete"
	OpList   = "list"
)
