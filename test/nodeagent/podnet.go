package nodeagent

import (
	"fmt"
	"net/netip"
)

// The cluster network of pods the agent runs as processes (RunPods), on one
// machine without network namespaces:
//
//   - A pod IP comes from PodNetwork (10.244.<node>.<n>), as a network
//     plugin's would: it is what the pod's status, the EndpointSlices and so
//     kube-aggregator's availability check see, and loopback addresses are
//     not allowed there (EndpointSlice validation).
//   - The pod's process listens on PodLoopback(podIP) (127.244.<node>.<n>):
//     the overlay is this fixed translation, so every part of the stand-in
//     (probes, the Service proxy, tests) routes a pod IP without shared state.
//   - Services get ClusterIPs from ServiceNetwork, on loopback, where the
//     Service proxy (ServiceProxy, the kube-proxy stand-in) listens.
var (
	// PodNetwork holds the pod IPs of process-run pods.
	PodNetwork = netip.MustParsePrefix("10.244.0.0/16")
	// ServiceNetwork is the Service ClusterIP range to give kube-apiserver
	// (--service-cluster-ip-range) when a ServiceProxy serves Services.
	ServiceNetwork = netip.MustParsePrefix("127.96.0.0/16")
)

// PodLoopback is the loopback address where the pod of podIP listens: the
// PodNetwork address with its first octet 127. ok is false for an address
// outside PodNetwork.
func PodLoopback(podIP netip.Addr) (netip.Addr, bool) {
	if !PodNetwork.Contains(podIP) {
		return netip.Addr{}, false
	}
	b := podIP.As4()
	b[0] = 127
	return netip.AddrFrom4(b), true
}

// podIPFor is the inverse of PodLoopback.
func podIPFor(loopback netip.Addr) netip.Addr {
	b := loopback.As4()
	b[0] = PodNetwork.Addr().As4()[0]
	return netip.AddrFrom4(b)
}

// podSubnetPool is the address pool of node subnet on the pod network, as
// loopback addresses (127.244.<subnet>.2-254).
func podSubnetPool(subnet uint8) (*AddrPool, error) {
	if subnet == 0 {
		return nil, fmt.Errorf("pod subnet 0 is reserved; give each node agent its own subnet from 1")
	}
	b := PodNetwork.Addr().As4()
	first := netip.AddrFrom4([4]byte{127, b[1], subnet, 2})
	last := netip.AddrFrom4([4]byte{127, b[1], subnet, 254})
	return NewAddrPool(first, last)
}
