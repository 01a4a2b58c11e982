// Package operatore2e runs the ProxyLease API as it ships: the whole operator
// (cmd/proxy-operator/app.Run, in process) with the local node agent running
// real Squid for its pods, a real etcd and kube-apiserver, the APIService of
// artifacts/apiserver/dev, and kubectl and client-go as the crawlers. A lease
// created with kubectl names a Proxy whose URL forwards through Squid.
//
// It imports the product's packages; nothing imports it.
package operatore2e
