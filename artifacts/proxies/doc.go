// Package proxies holds the manifests of the namespaces where the
// kubernetes provider runs Squid pods: their NetworkPolicy (ingress on the
// proxy port only; egress to DNS, the public internet and the operator's
// discovery API). FS embeds them for tests.
//
// It imports nothing of the module.
package proxies
