// Package apiserver is the operator's aggregated API server: a k8s.io/apiserver
// GenericAPIServer, run as a controller-runtime Runnable that is not
// leader-elected, serving the ProxyLease resource (leasing.crawl.example.com)
// through its registry (pkg/registry/proxylease) over the leasing Service.
//
// It owns: its own pflag set (every flag prefixed "apiserver-", so nothing
// clashes with controller-runtime's --kubeconfig or the operator's flags), its
// own runtime.Scheme (separate from the manager's), delegated authentication
// and authorization to kube-apiserver, the trust in kube-apiserver's
// authorization of the requests it proxies (frontproxy.go), and the lean path
// that answers a proxied ProxyLease create or delete ahead of the generic
// handler chain (leanpath.go) with a decoder and an encoder of its own
// (decode.go, encode.go), each held by tests to the generic server's
// serializer byte for byte.
//
// It must not import pkg/lease, pkg/flowcontrol, pkg/discovery,
// pkg/controller or pkg/metrics, and it installs no signal handler and no
// logging setup of its own: the process (cmd/proxy-operator) owns both and
// hands them in through the Start context.
package apiserver
