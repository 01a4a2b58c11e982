// Package deve2e tests the dev environment end to end, started by the same
// code as `make dev` (test/devenv) on free ports: the sample fleet turns
// Ready through real squid, and a crawler can use it the way README and
// docs/api.md say — kubectl, the HTTP discovery API with its token (list,
// lease, fetch through the proxy with curl -x, report, release; 401 without
// the token), a waiting lease granted on release, ProxyLeases through
// kube-apiserver — and teardown leaves no process behind.
//
// It imports the product's packages and test tooling; nothing imports it.
package deve2e
