package proxies_test

import (
	"net"

	"github.com/google/go-cmp/cmp"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/artifacts/proxies"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// The policy selects every Squid pod the provider makes (whatever the
// installation's tag), admits only the proxy port, and lets the pods reach
// public addresses but no private one.
func TestNetworkPolicy(t *testing.T) {
	np := manifest(t)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{provider.DefaultTag, "proxy-operator-0123456789ab"} {
		pod := labels.Set{provider.TagLabel: tag, provider.OwnerUIDLabel: "uid"}
		if !sel.Matches(pod) {
			t.Errorf("the policy does not select a Squid pod labelled %v", pod)
		}
	}
	if sel.Matches(labels.Set{"app": "other"}) {
		t.Error("the policy selects pods that are not the operator's")
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 0 || len(np.Spec.Ingress[0].Ports) != 1 ||
		*np.Spec.Ingress[0].Ports[0].Port != intstr.FromString(kubernetes.PortName) {
		t.Errorf("ingress %+v: want the proxy port only", np.Spec.Ingress)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Fatal("egress is not restricted")
	}
	allowed := func(ip string) bool {
		addr := net.ParseIP(ip)
		for _, rule := range np.Spec.Egress {
			for _, peer := range rule.To {
				if peer.IPBlock == nil {
					continue
				}
				_, cidr, _ := net.ParseCIDR(peer.IPBlock.CIDR)
				if !cidr.Contains(addr) {
					continue
				}
				excepted := false
				for _, e := range peer.IPBlock.Except {
					if _, ex, _ := net.ParseCIDR(e); ex.Contains(addr) {
						excepted = true
					}
				}
				if !excepted {
					return true
				}
			}
		}
		return false
	}
	for ip, want := range map[string]bool{
		"93.184.215.14": true, "2606:2800:21f:cb07:6820:80da:af6b:8b2c": true,
		"10.96.0.1": false, "172.20.1.1": false, "192.168.1.1": false, "169.254.169.254": false, "100.64.0.10": false,
		"127.0.0.1": false, "fd00::1": false,
	} {
		if got := allowed(ip); got != want {
			t.Errorf("egress to %s allowed = %v, want %v", ip, got, want)
		}
	}
}

// The manifest is the policy the operator keeps in each namespace of Squid
// pods (--kubernetes-network-policy) with no --proxy-*-cidrs flag: applying
// it by hand changes nothing the operator made.
func TestNetworkPolicyIsTheOperators(t *testing.T) {
	np := manifest(t)
	want := kubernetes.NetworkPolicy("", "proxy-operator-system", proxyauth.Egress{})
	if diff := cmp.Diff(want.Spec, np.Spec); diff != "" {
		t.Errorf("artifacts/proxies differs from the operator's policy (-operator +manifest):\n%s", diff)
	}
	if np.Name != kubernetes.NetworkPolicyName {
		t.Errorf("name %q, want %q", np.Name, kubernetes.NetworkPolicyName)
	}
}

// manifest is networkpolicy.yaml, decoded strictly.
func manifest(t *testing.T) networkingv1.NetworkPolicy {
	t.Helper()
	b, err := proxies.FS.ReadFile("networkpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var np networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict(b, &np); err != nil {
		t.Fatal(err)
	}
	return np
}
