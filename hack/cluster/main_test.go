package main

import (
	"archive/tar"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(c *config)
		want   string // in the error; "" for none
	}{
		{name: "defaults", change: func(*config) {}},
		{name: "site address private", change: func(c *config) { c.SiteAddr = netip.MustParseAddr("10.1.2.3") }, want: "-site-address 10.1.2.3"},
		{name: "pods overlap services", change: func(c *config) { c.PodCIDR = netip.MustParsePrefix("10.96.0.0/24") }, want: "must not overlap"},
		{name: "node address in the pod range", change: func(c *config) { c.NodeAddr = netip.MustParseAddr("10.244.0.9") }, want: "must not overlap"},
		{name: "pod range too small", change: func(c *config) { c.PodCIDR = netip.MustParsePrefix("10.244.0.0/28") }, want: "-pod-cidr"},
		{name: "IPv6 node", change: func(c *config) { c.NodeAddr = netip.MustParseAddr("fd00::2") }, want: "must be IPv4"},
		{name: "namespace name too long for a veth", change: func(c *config) { c.Netns = "proxy-operator-cluster" }, want: "-netns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := defaultConfig()
			if err != nil {
				t.Fatal(err)
			}
			tc.change(&c)
			err = c.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validate = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestServiceAddresses(t *testing.T) {
	c, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	got := []string{c.APIServiceIP().String(), c.DNSServiceIP().String()}
	if diff := cmp.Diff([]string{"10.96.0.1", "10.96.0.10"}, got); diff != "" {
		t.Errorf("kubernetes and DNS Service IPs (-want +got):\n%s", diff)
	}
}

// TestImageRefs reads each tarball's name from its docker manifest, and
// refuses a directory that lacks one of the images the node runs.
func TestImageRefs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, manifest string) {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, name+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		tw := tar.NewWriter(f)
		if err := tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(manifest))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(manifest)); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// kube-network-policies' image is optional (policyAgent).
	names := []string{pauseImageName, corednsImageName, "operator", "squid", "toolbox"}
	for _, n := range names[:4] {
		write(n, `[{"Config":"c","RepoTags":["example.invalid/`+n+`:v1"],"Layers":[]}]`)
	}
	if _, err := imageRefs(dir); err == nil || !strings.Contains(err.Error(), "no toolbox.tar") {
		t.Fatalf("imageRefs without toolbox.tar = %v, want an error naming it", err)
	}
	write("toolbox", `[{"Config":"c","RepoTags":["example.invalid/toolbox:v1"],"Layers":[]}]`)
	refs, err := imageRefs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, n := range names {
		want[n] = "example.invalid/" + n + ":v1"
	}
	if diff := cmp.Diff(want, refs); diff != "" {
		t.Errorf("refs (-want +got):\n%s", diff)
	}
	write("operator", `[{"Config":"c","RepoTags":[],"Layers":[]}]`)
	if _, err := imageRefs(dir); err == nil || !strings.Contains(err.Error(), "operator.tar") {
		t.Fatalf("imageRefs with an untagged operator.tar = %v, want an error naming it", err)
	}
}

// TestAddonsWithoutPolicyAgent: where no agent can run, only DNS is
// applied.
func TestAddonsWithoutPolicyAgent(t *testing.T) {
	c, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{corednsImageName: "example.invalid/coredns:v1", netpolImageName: "example.invalid/netpol:v1"}
	with, without := addons(c, images, true), addons(c, images, false)
	for _, tc := range []struct {
		text, what string
		want       bool
	}{
		{with, "kind: DaemonSet", true}, {with, "example.invalid/netpol:v1", true}, {with, "clusterIP: 10.96.0.10", true},
		{without, "kind: DaemonSet", false}, {without, "example.invalid/netpol:v1", false}, {without, "clusterIP: 10.96.0.10", true},
	} {
		if got := strings.Contains(tc.text, tc.what); got != tc.want {
			t.Errorf("add-ons contain %q: %v, want %v", tc.what, got, tc.want)
		}
	}
}

// TestPolicyAgent: the agent runs only where the kernel can queue to user
// space and its image was built; otherwise the reason is said.
func TestPolicyAgent(t *testing.T) {
	built := map[string]string{netpolImageName: "example.invalid/netpol:v1"}
	noQueue := errors.New("this kernel's nftables has no queue to user space (nft_queue)")
	for _, tc := range []struct {
		name   string
		images map[string]string
		probe  error
		want   string
	}{
		{"runs", built, nil, netpolImageName},
		{"kernel cannot", built, noQueue, "none: " + noQueue.Error()},
		{"not built", map[string]string{}, nil, "none: no kube-network-policies.tar among the images"},
		{"neither", map[string]string{}, noQueue, "none: " + noQueue.Error()},
	} {
		if got := policyAgent(tc.images, tc.probe); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: policyAgent = %q, want %q…", tc.name, got, tc.want)
		}
	}
}
