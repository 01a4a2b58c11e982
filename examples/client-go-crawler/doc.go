// Command client-go-crawler is what a crawler running in the cluster does
// with the ProxyLease API and the generated typed clientset: lease a proxy
// (a ProxyLease in its own namespace, which RBAC allows it to create), fetch
// a URL through it while renewing the lease, report how that went (ok,
// rate_limited on 429, banned on 403) and delete the lease.
//
// In a pod it uses the in-cluster config and the pod's namespace; outside,
// the usual kubeconfig (-kubeconfig, $KUBECONFIG, ~/.kube/config):
//
//	go run ./examples/client-go-crawler -kubeconfig .dev/kubeconfig -namespace default \
//	    -url https://example.com/ -selector region=eu
//
// The ServiceAccount needs the proxy-operator:crawler ClusterRole bound in its
// namespace (artifacts/apiserver/examples/crawler-rbac.yaml).
package main
