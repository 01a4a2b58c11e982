// Package apiserver is the operator's aggregated API server: a k8s.io/apiserver
// GenericAPIServer, run as a controller-runtime Runnable that is not
// leader-elected, serving the ProxyLease resource (leasing.crawl.example.com)
// through the leasing Service (pkg/leasing) over the in-memory lease store
// that the HTTP discovery API also uses; statusFor maps the Service's error
// vocabulary to API statuses in one place.
//
// It owns: its own pflag set (every flag prefixed "apiserver-", so nothing
// clashes with controller-runtime's --kubeconfig or the operator's flags), its
// own runtime.Scheme (separate from the manager's), delegated authentication
// and authorization to kube-apiserver, the REST storage of proxyleases and
// proxyleases/report, the watch fan-out fed by the store's events, the
// server-side table, the trust in kube-apiserver's authorization of the
// requests it proxies (frontproxy.go), and the lean path that answers a
// proxied ProxyLease create or delete ahead of the generic handler chain
// (leanpath.go) with a decoder and an encoder of its own (decode.go,
// encode.go), each held by tests to the generic server's serializer byte for
// byte.
//
// It must not import pkg/discovery, pkg/controller or pkg/metrics, and it
// installs no signal handler and no logging setup of its own: the process
// (cmd/proxy-operator) owns both and hands them in through the Start context.
package apiserver
