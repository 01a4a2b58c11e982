// Package devenv is the local development environment as a library: the
// ordered list of components `make dev` (hack/dev) runs, and that the dev
// e2e test (test/e2e/dev) starts the same way.
//
// Components, started in this order and stopped in reverse:
//
//  1. the control plane (test/controlplane: etcd, kube-apiserver, CRDs);
//  2. the node agent (test/nodeagent), the kubelet of the operator's Squid
//     pods, each squid on its own 127.0.0.N:3128;
//  3. a local origin HTTP server on 127.0.0.1, the target of the sample
//     fleet's health checks and of curl examples (the machine may have no
//     internet);
//  4. the operator as its own processes (bin/proxy-operator, built into
//     <Dir>/bin unless Options.OperatorBinary), Options.Operators of them
//     (leader-elected when more than one, behind a forwarding service on
//     the dev ports that picks the ready one, as a Service does), each
//     restarted whenever it exits as a kubelet restarts a container, its pid
//     in <Dir>/operator.pid (operator-<i>.pid). Configured as installed: its
//     own CA and serving certificate, a generated discovery token, the lease
//     checkpoint and signed lease IDs in proxy-operator-system, the HTTP
//     discovery API over HTTPS and the aggregated ProxyLease API server.
//     Before it starts, the Namespace, the ExternalName Service and the
//     APIService (artifacts/apiserver's dev variant on this run's port,
//     without caBundle: the operator writes it) are applied;
//  5. the shipped delegation RBAC and ClusterRoles, then the APIService
//     awaited Available (kube-apiserver verifies the operator's CA);
//  6. the sample fleet (artifacts/examples/fleet) with each Proxy's
//     spec.healthCheck.url set to the origin before it is applied, awaited
//     phase Ready.
//
// Then Start writes <Dir>/ready. The files under Dir are the contract of
// README's "Using the dev environment": kubeconfig, discovery-token,
// discovery-url, ca.crt, ready, operator*.pid; logs go to <Dir>/logs.
//
// It may import anything of the module (it is test tooling, like
// test/controlplane); nothing but hack/dev and tests may import it.
package devenv
