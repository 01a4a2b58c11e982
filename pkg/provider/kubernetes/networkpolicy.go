package kubernetes

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

const (
	// NetworkPolicyName names the policy of the Squid pods in each
	// namespace that has them (artifacts/proxies applies the same).
	NetworkPolicyName = "proxy-operator-squid"
	// operatorDiscoveryPort is the operator's container port the pods'
	// auth helpers poll.
	operatorDiscoveryPort = "discovery"
	// operatorNameLabel selects the operator's pods.
	operatorNameLabel = "app.kubernetes.io/name"
	operatorName      = "proxy-operator"
)

// NetworkPolicy is the policy of the Squid pods in namespace: ingress to
// the proxy port only (Squid answers 407 without a lease's credentials);
// egress to DNS, to the operator's discovery API in operatorNamespace (the
// auth helpers' live list), and to public addresses only, plus the ranges
// egress opens (--proxy-allowed-cidrs). It holds where no Squid rule can:
// the pod's other ports and anything the pod's processes dial themselves.
func NetworkPolicy(namespace, operatorNamespace string, egress proxyauth.Egress) *networkingv1.NetworkPolicy {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	var v4Except, v6Except []string
	for _, p := range proxyauth.BlockedCIDRs() {
		// 0.0.0.0/8, multicast and reserved: not a pod's to reach, and not
		// what the artifacts/proxies policy has ever listed.
		switch p.String() {
		case "0.0.0.0/8", "192.0.0.0/24", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4", "::/128", "64:ff9b:1::/48", "ff00::/8":
			continue
		}
		if p.Addr().Is4() {
			v4Except = append(v4Except, p.String())
		} else {
			v6Except = append(v6Except, p.String())
		}
	}
	for _, p := range egress.DeniedCIDRs {
		if p.Addr().Is4() {
			v4Except = append(v4Except, p.String())
		} else {
			v6Except = append(v6Except, p.String())
		}
	}
	public := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: v4Except}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: v6Except}},
	}}
	rules := []networkingv1.NetworkPolicyEgressRule{
		{Ports: []networkingv1.NetworkPolicyPort{
			{Port: ptr.To(intstr.FromInt32(53)), Protocol: &udp},
			{Port: ptr.To(intstr.FromInt32(53)), Protocol: &tcp},
		}},
		{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: operatorNamespace}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{operatorNameLabel: operatorName}},
			}},
			Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString(operatorDiscoveryPort)), Protocol: &tcp}},
		},
		public,
	}
	if len(egress.AllowedCIDRs) > 0 {
		var opened []networkingv1.NetworkPolicyPeer
		for _, p := range egress.AllowedCIDRs {
			opened = append(opened, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.String()}})
		}
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: opened})
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      NetworkPolicyName,
			Namespace: namespace,
			Labels:    map[string]string{"app.kubernetes.io/part-of": operatorName, "app.kubernetes.io/managed-by": operatorName},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: provider.TagLabel, Operator: metav1.LabelSelectorOpExists},
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString(PortName)), Protocol: &tcp}},
			}},
			Egress: rules,
		},
	}
}

// keepNetworkPolicy makes pod an owner of its namespace's policy,
// creating the policy if missing: the policy lives while any Squid pod of
// the namespace does (the garbage collector deletes it after the last).
// An existing policy's spec is left as it is (an administrator's edit, or
// artifacts/proxies applied by hand, wins).
func (p *Provider) keepNetworkPolicy(ctx context.Context, pod *corev1.Pod) error {
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var np networkingv1.NetworkPolicy
		err := p.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: NetworkPolicyName}, &np)
		if apierrors.IsNotFound(err) {
			want := NetworkPolicy(pod.Namespace, p.opts.OperatorNamespace, p.opts.Egress)
			want.OwnerReferences = []metav1.OwnerReference{owner}
			err = p.c.Create(ctx, want)
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(networkingv1.Resource("networkpolicies"), NetworkPolicyName, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if slices.ContainsFunc(np.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == owner.UID }) {
			return nil
		}
		np.OwnerReferences = append(np.OwnerReferences, owner)
		return p.c.Update(ctx, &np)
	})
	if err != nil {
		return classify(provider.OpCreate, fmt.Errorf("keeping NetworkPolicy %s/%s: %w", pod.Namespace, NetworkPolicyName, err))
	}
	return nil
}
