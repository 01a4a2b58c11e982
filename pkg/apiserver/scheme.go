package apiserver

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// NewScheme returns the scheme the server encodes and decodes with: the
// leasing types under v1alpha1 and, as the same Go types, under the internal
// version (so no conversion functions are needed), plus the meta types every
// API server serves. It is never shared with the controller-runtime manager.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := leasingv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering %s: %w", leasingv1alpha1.SchemeGroupVersion, err)
	}
	if err := leasingv1alpha1.AddInternalToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering %s: %w", leasingv1alpha1.InternalGroupVersion, err)
	}
	if err := scheme.SetVersionPriority(leasingv1alpha1.SchemeGroupVersion); err != nil {
		return nil, fmt.Errorf("setting version priority: %w", err)
	}
	// The generic server decodes list and delete options as meta/v1 and serves
	// Status and discovery documents unversioned.
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	scheme.AddUnversionedTypes(schema.GroupVersion{Group: "", Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	return scheme, nil
}

// newOpenAPINamerScheme is the scheme the OpenAPI definition namer reads: the
// external version only, so the published x-kubernetes-group-version-kind of
// ProxyLease does not also list the internal version.
func newOpenAPINamerScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := leasingv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering %s: %w", leasingv1alpha1.SchemeGroupVersion, err)
	}
	return scheme, nil
}

// newCodecs returns the codec factory for scheme.
func newCodecs(scheme *runtime.Scheme) serializer.CodecFactory {
	return serializer.NewCodecFactory(scheme)
}
