// Package pool tests the ProxyPool controller against a real kube-apiserver:
// the controller runs in a manager authenticated as the operator (its
// generated ClusterRole only), with a real lease store fed by the manager's
// Proxy informer and the real wait queue in front of it. No Proxy reconciler
// runs: the test plays it, marking a pool's Proxies provisioned and healthy
// (status), so that what is tested is the pool: sizes, the scale subresource,
// draining, autoscaling from waiting requests, adoption and release.
package pool
