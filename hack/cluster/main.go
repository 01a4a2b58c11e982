package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// Names of the contract files in the state directory.
const (
	KubeconfigFile = "kubeconfig"
	ImagesFile     = "images"
	ReadyFile      = "ready"
	// SiteAddressFile holds the node's stand-in for a public site's address
	// (see config.SiteAddr).
	SiteAddressFile = "site-address"
	// NetworkPolicyFile names the NetworkPolicy agent that runs
	// ("kube-network-policies"), or says why none does ("none: …").
	NetworkPolicyFile = "networkpolicy"
)

// config is what both halves (the host's supervisor and the node) agree
// on; the supervisor passes it to the node as flags.
type config struct {
	// Dir is the state directory (.cluster).
	Dir string
	// BinDir holds the pinned binaries.
	BinDir string
	// ImagesDir holds the image tarballs to load (`make cluster-images`).
	ImagesDir string
	// Netns names the node's network namespace; Cgroup its cgroup in every
	// hierarchy.
	Netns, Cgroup string
	// NodeName is the Node's name.
	NodeName string
	// HostAddr and NodeAddr are the two ends of the veth pair (a /30).
	HostAddr, NodeAddr netip.Addr
	// SiteAddr is an address of the node outside every private range
	// (TEST-NET-3 by default): a stand-in for the public internet, which
	// nothing here reaches. A host-network pod listening on it is a site
	// that a proxy under artifacts/proxies' NetworkPolicy may still reach.
	SiteAddr netip.Addr
	// PodCIDR is the bridge's range, ServiceCIDR kube-apiserver's.
	PodCIDR, ServiceCIDR netip.Prefix
	// KeepLogs leaves the logs in Dir/logs at exit.
	KeepLogs bool
}

func (c *config) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Dir, "dir", c.Dir, "state directory (removed at exit)")
	fs.StringVar(&c.BinDir, "bin-dir", c.BinDir, "directory of the pinned binaries (make tools, hack/tools/install.sh cluster)")
	fs.StringVar(&c.ImagesDir, "images-dir", c.ImagesDir, "directory of the image tarballs to load (make cluster-images)")
	fs.StringVar(&c.Netns, "netns", c.Netns, "name of the node's network namespace")
	fs.StringVar(&c.Cgroup, "cgroup", c.Cgroup, "name of the node's cgroup in every hierarchy")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "name of the Node")
	fs.TextVar(&c.HostAddr, "host-address", c.HostAddr, "the machine's end of the veth pair")
	fs.TextVar(&c.NodeAddr, "node-address", c.NodeAddr, "the node's end of the veth pair: its InternalIP and kube-apiserver's address")
	fs.TextVar(&c.SiteAddr, "site-address", c.SiteAddr, "the node's stand-in for a public site's address (outside the private ranges)")
	fs.TextVar(&c.PodCIDR, "pod-cidr", c.PodCIDR, "the pods' range (the CNI bridge)")
	fs.TextVar(&c.ServiceCIDR, "service-cidr", c.ServiceCIDR, "the Services' range; its 10th address is the cluster DNS")
	fs.BoolVar(&c.KeepLogs, "keep-logs", c.KeepLogs, "keep the components' logs in <dir>/logs at exit")
}

func (c *config) validate() error {
	var errs []error
	if !c.HostAddr.Is4() || !c.NodeAddr.Is4() || !c.SiteAddr.Is4() {
		errs = append(errs, errors.New("-host-address, -node-address and -site-address must be IPv4"))
	}
	if c.SiteAddr.IsPrivate() || c.SiteAddr.IsLoopback() {
		errs = append(errs, fmt.Errorf("-site-address %s: want an address outside the private ranges (it stands in for a public site)", c.SiteAddr))
	}
	if !c.PodCIDR.Addr().Is4() || c.PodCIDR.Bits() > 24 {
		errs = append(errs, fmt.Errorf("-pod-cidr %s: want an IPv4 /24 or wider", c.PodCIDR))
	}
	if !c.ServiceCIDR.Addr().Is4() || c.ServiceCIDR.Bits() > 24 {
		errs = append(errs, fmt.Errorf("-service-cidr %s: want an IPv4 /24 or wider", c.ServiceCIDR))
	}
	if c.PodCIDR.Overlaps(c.ServiceCIDR) || c.PodCIDR.Contains(c.NodeAddr) || c.ServiceCIDR.Contains(c.NodeAddr) {
		errs = append(errs, errors.New("the pod range, the Service range and the node's address must not overlap"))
	}
	if len(c.Netns) == 0 || len(c.Netns) > 15 {
		errs = append(errs, fmt.Errorf("-netns %q: want 1 to 15 characters (it also names the veth)", c.Netns))
	}
	return errors.Join(errs...)
}

// nthAddr is the n-th address of p (0 is the network's).
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}

// APIServiceIP is the kubernetes Service's ClusterIP, DNSServiceIP the
// cluster DNS's.
func (c *config) APIServiceIP() netip.Addr { return nthAddr(c.ServiceCIDR, 1) }
func (c *config) DNSServiceIP() netip.Addr { return nthAddr(c.ServiceCIDR, 10) }

func defaultConfig() (config, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return config{}, err
	}
	return config{
		Dir:         filepath.Join(root, ".cluster"),
		BinDir:      filepath.Join(root, "bin"),
		ImagesDir:   filepath.Join(root, "bin", "cluster-images"),
		Netns:       "po-cluster",
		Cgroup:      "proxy-operator-cluster",
		NodeName:    "proxy-operator-node",
		HostAddr:    netip.MustParseAddr("10.231.0.1"),
		NodeAddr:    netip.MustParseAddr("10.231.0.2"),
		SiteAddr:    netip.MustParseAddr("203.0.113.1"),
		PodCIDR:     netip.MustParsePrefix("10.244.0.0/24"),
		ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"),
	}, nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	c, err := defaultConfig()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	c.addFlags(fs)
	down := fs.Bool("down", false, "only remove what an earlier run left (after a SIGKILL) and exit")
	node := fs.Bool("node", false, "internal: run the node's side (the supervisor starts it inside the namespaces)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("make cluster needs root: it makes a network namespace, mounts and cgroups")
	}
	switch {
	case *node:
		return runNode(c)
	case *down:
		return teardown(c)
	default:
		return supervise(c, args)
	}
}
