package main

import (
	"fmt"
	"path/filepath"
)

// Paths of the node's sockets, in the node's private /run.
const (
	runDir           = "/run/proxy-operator-cluster"
	containerdSocket = runDir + "/containerd.sock"
	// cniNetwork names the bridge network (and its IPAM state).
	cniNetwork = "proxy-operator-cluster"
)

// containerdConfig is containerd's configuration (version 2, as Debian's
// 1.6 reads): every path its own, so nothing collides with a containerd of
// the machine.
func containerdConfig(c config, pauseImage string) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj, and every
  # sandbox fails ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # No AppArmor in this kernel.
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, filepath.Join(c.Dir, "containerd"), filepath.Join(runDir, "containerd-state"),
		containerdSocket, containerdSocket+".ttrpc", pauseImage, filepath.Join(c.Dir, "cni"))
}

// cniConfig is the node's pod network: a bridge in the node's namespace,
// the pods' default route through it (and no further: the namespace routes
// nowhere), hairpin so a pod reaches itself through its Service.
func cniConfig(c config) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, cniNetwork, c.PodCIDR.String(), filepath.Join(runDir, "cni-ipam"))
}

// kubeletConfig is the KubeletConfiguration: cgroup v1 allowed (deprecated
// in 1.37, refused by default), cgroupfs under the node's own cgroup, no
// eviction or image garbage collection a busy CI disk would trigger (the
// images cannot be pulled again), the machine's kernel settings left to
// the teardown.
func kubeletConfig(c config, clientCA string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
containerRuntimeEndpoint: unix://%s
failSwapOn: false
resolvConf: ""
clusterDNS: [%q]
clusterDomain: cluster.local
podLogsDir: %q
address: %q
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization:
  mode: Webhook
protectKernelDefaults: false
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
`, c.Cgroup, containerdSocket, c.DNSServiceIP(), filepath.Join(c.Dir, "pod-logs"), c.NodeAddr, clientCA)
}

// kubeProxyConfig runs kube-proxy in nftables mode (the kernel's nft, no
// iptables lock), leaving the machine-wide conntrack table size alone.
func kubeProxyConfig(c config, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %q
hostnameOverride: %q
clusterCIDR: %q
conntrack:
  maxPerCore: 0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, kubeconfig, c.NodeName, c.PodCIDR.String())
}
