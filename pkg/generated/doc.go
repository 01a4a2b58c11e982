// Package generated holds the code generated for the ProxyLease API by
// hack/update-codegen-leasing.sh (k8s.io/code-generator and kube-openapi):
// the typed clientset (clientset/versioned, with a fake), listers, informers,
// and the OpenAPI definitions the aggregated server publishes (openapi).
// Do not edit below it; run `make generate`.
//
// It imports only apis/leasing and Kubernetes libraries.
package generated
