// Package ha is the end-to-end test a platform engineer would run against
// an install: kube-apiserver with kube-controller-manager, two node agents
// (test/nodeagent) that run the operator's own pods as processes from the
// production overlay applied with kubectl, and the Service proxy in the
// place of kube-proxy and cluster DNS. Under load from both lease APIs it
// rolls the Deployment, drains the leader's node and crashes the leader,
// and checks the history: no lease lost and no proxy granted twice in the
// planned cases, the APIService Available throughout them.
package ha
