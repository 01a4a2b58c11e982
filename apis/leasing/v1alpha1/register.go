package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of ProxyLease.
const GroupName = "leasing.crawl.example.com"

// SchemeGroupVersion is the served version. Generated clients and listers refer
// to it by this name.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// InternalGroupVersion is the hub version the API server decodes into. The same
// Go types are registered under it, so the scheme needs no conversion
// functions.
var InternalGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// Resource names, as served.
const (
	ResourceProxyLeases = "proxyleases"
	SubresourceReport   = "report"
)

// Resource qualifies an unqualified resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

// Kind qualifies a kind with this group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// AddToScheme registers the v1alpha1 types, their defaulting functions and the
// field selectors the server supports. Clients (the generated clientset) use it
// as is; the server also calls AddInternalToScheme.
func AddToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &ProxyLease{}, &ProxyLeaseList{}, &ProxyLeaseReport{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	RegisterDefaults(scheme)
	if err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("ProxyLease"), convertFieldLabel); err != nil {
		return fmt.Errorf("registering field selectors of ProxyLease: %w", err)
	}
	return nil
}

// AddInternalToScheme registers the same Go types under the internal version.
// Because a type known under both versions converts to itself, the server's
// decode-to-internal and encode-to-v1alpha1 steps need no conversion functions.
func AddInternalToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(InternalGroupVersion, &ProxyLease{}, &ProxyLeaseList{}, &ProxyLeaseReport{})
	return nil
}

// RegisterDefaults registers the defaulting functions of this package's types.
func RegisterDefaults(scheme *runtime.Scheme) {
	scheme.AddTypeDefaultingFunc(&ProxyLease{}, func(obj any) { SetDefaults_ProxyLease(obj.(*ProxyLease)) })
	scheme.AddTypeDefaultingFunc(&ProxyLeaseList{}, func(obj any) {
		list := obj.(*ProxyLeaseList)
		for i := range list.Items {
			SetDefaults_ProxyLease(&list.Items[i])
		}
	})
}

// Field selector labels supported on list and watch, besides metadata.name and
// metadata.namespace.
const (
	FieldTarget         = "spec.target"
	FieldHolderIdentity = "status.holderIdentity"
	FieldProxyName      = "status.proxy.name"
	FieldLeaseID        = "status.leaseID"
)

func convertFieldLabel(label, value string) (string, string, error) {
	switch label {
	case "metadata.name", "metadata.namespace", FieldTarget, FieldHolderIdentity, FieldProxyName, FieldLeaseID:
		return label, value, nil
	default:
		return "", "", fmt.Errorf("field label %q is not supported for ProxyLease (supported: metadata.name, metadata.namespace, %s, %s, %s, %s)",
			label, FieldTarget, FieldHolderIdentity, FieldProxyName, FieldLeaseID)
	}
}

// SelectableFields returns the values a field selector matches against.
func SelectableFields(l *ProxyLease) fields.Set {
	proxyName := ""
	if l.Status.Proxy != nil {
		proxyName = l.Status.Proxy.Name
	}
	return fields.Set{
		"metadata.name":      l.Name,
		"metadata.namespace": l.Namespace,
		FieldTarget:          l.Spec.Target,
		FieldHolderIdentity:  l.Status.HolderIdentity,
		FieldProxyName:       proxyName,
		FieldLeaseID:         l.Status.LeaseID,
	}
}
