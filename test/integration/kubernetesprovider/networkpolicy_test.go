package kubernetesprovider

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// The provider keeps its Squid pods' NetworkPolicy in each namespace that
// has them: made with the first pod (the operator's policy, the opened
// ranges included), every pod an owner (so it goes with the last), an
// administrator's edit of its spec kept; none where the option is off.
func TestPodsKeepTheirNetworkPolicy(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	egress := proxyauth.Egress{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}}
	create := func(t *testing.T, opts kubernetes.Options, ns string) types.UID {
		t.Helper()
		p, err := kubernetes.New(e.admin, opts)
		if err != nil {
			t.Fatal(err)
		}
		uid := uuid.NewUUID()
		req := provider.CreateRequest{Name: provider.NameFromUID(uid), Tag: provider.DefaultTag, OwnerUID: uid, Namespace: ns}
		if _, err := p.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
		// Create again (a retried attempt): still one owner entry.
		if _, err := p.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
		var pod corev1.Pod
		if err := e.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: req.Name}, &pod); err != nil {
			t.Fatal(err)
		}
		return pod.UID
	}
	policy := func(t *testing.T, ns string) (*networkingv1.NetworkPolicy, error) {
		t.Helper()
		var np networkingv1.NetworkPolicy
		err := e.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: kubernetes.NetworkPolicyName}, &np)
		return &np, err
	}
	on := kubernetes.Options{NodeName: nodeName, NetworkPolicy: true, OperatorNamespace: "proxy-operator-system", Egress: egress}

	t.Run("kept", func(t *testing.T) {
		const ns = "policy-kept"
		e.restrictedNamespace(t, ns)
		first := create(t, on, ns)
		np, err := policy(t, ns)
		if err != nil {
			t.Fatalf("no policy after the first pod: %v", err)
		}
		if diff := cmp.Diff(kubernetes.NetworkPolicy(ns, "proxy-operator-system", egress).Spec, np.Spec); diff != "" {
			t.Errorf("policy (-want +got):\n%s", diff)
		}
		// An administrator narrows it; the next pod keeps the edit.
		np.Spec.Ingress = nil
		if err := e.admin.Update(ctx, np); err != nil {
			t.Fatal(err)
		}
		second := create(t, on, ns)
		np, err = policy(t, ns)
		if err != nil {
			t.Fatal(err)
		}
		var owners []types.UID
		for _, o := range np.OwnerReferences {
			if o.Kind != "Pod" || o.APIVersion != "v1" {
				t.Errorf("owner %+v is not a pod", o)
			}
			owners = append(owners, o.UID)
		}
		slices.Sort(owners)
		want := []types.UID{first, second}
		slices.Sort(want)
		if diff := cmp.Diff(want, owners); diff != "" {
			t.Errorf("owners (-want +got):\n%s", diff)
		}
		if len(np.Spec.Ingress) != 0 {
			t.Errorf("the administrator's edit was undone: %+v", np.Spec.Ingress)
		}
	})
	t.Run("off", func(t *testing.T) {
		const ns = "policy-off"
		e.restrictedNamespace(t, ns)
		off := on
		off.NetworkPolicy = false
		create(t, off, ns)
		if _, err := policy(t, ns); !apierrors.IsNotFound(err) {
			t.Errorf("policy with --kubernetes-network-policy=false: %v, want NotFound", err)
		}
	})
	t.Run("no operator namespace", func(t *testing.T) {
		noNS := on
		noNS.OperatorNamespace = ""
		if _, err := kubernetes.New(e.admin, noNS); err == nil {
			t.Error("New without the operator's namespace: want an error")
		}
	})
}
