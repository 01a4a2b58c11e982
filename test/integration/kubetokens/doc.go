// Package kubetokens tests discovery.KubernetesTokens against a real
// kube-apiserver: a ServiceAccount token that RBAC lets create ProxyLeases
// in its namespace is that namespace's identity, one without the binding is
// forbidden, anything else unknown, and answers are cached for their TTL.
package kubetokens
