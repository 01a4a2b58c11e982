// Package v1alpha1 holds the ProxyLease API (group leasing.crawl.example.com): a
// lease on one proxy of the fleet, served by the operator's aggregated API server
// from its in-memory lease store and never stored in etcd.
//
// It owns the Go types, their scheme registration (the external version and the
// same types as the internal version, so the server needs no conversion
// functions), defaulting and validation. It must not import anything under pkg/.
//
// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:openapi-model-package=com.example.crawl.leasing.v1alpha1
// +groupName=leasing.crawl.example.com
package v1alpha1
