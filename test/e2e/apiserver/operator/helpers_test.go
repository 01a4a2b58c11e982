package operatore2e

import "github.com/proxy-operator/proxy-operator/pkg/discovery/wire"

func discoveryLease(ns string) wire.AcquireRequest {
	return wire.AcquireRequest{Namespace: ns, Selector: map[string]string{"region": "eu"}, Target: "example.com", TTLSeconds: 60}
}
