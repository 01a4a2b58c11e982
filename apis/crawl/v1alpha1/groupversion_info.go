package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every type in this package.
const GroupName = "crawl.example.com"

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Kind returns the group-qualified kind of this version, e.g. Kind("Proxy").
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource returns the group-qualified resource, e.g. Resource("proxies").
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

// AddToScheme registers Proxy, ProxyPool, SitePolicy and their lists with s. It is a function rather
// than the usual package-level SchemeBuilder so that nothing in this package
// can be appended to at run time (no init() registries).
func AddToScheme(s *runtime.Scheme) error {
	b := runtime.NewSchemeBuilder(addKnownTypes)
	return b.AddToScheme(s)
}

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Proxy{}, &ProxyList{}, &ProxyPool{}, &ProxyPoolList{}, &SitePolicy{}, &SitePolicyList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
