package nodeagent

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBindArgs(t *testing.T) {
	addr := netip.MustParseAddr("127.244.1.7")
	tests := []struct {
		name string
		args []string
		add  []string
		want []string
	}{
		{"every interface narrowed", []string{"--metrics-bind-address=:8080", "--gateway-bind-address=0.0.0.0:8888", "--x-bind-address=[::]:1", "--y-bind-address=0.0.0.0"},
			nil, []string{"--metrics-bind-address=127.244.1.7:8080", "--gateway-bind-address=127.244.1.7:8888", "--x-bind-address=127.244.1.7:1", "--y-bind-address=127.244.1.7"}},
		{"a host, a disabled listener and other flags kept", []string{"--discovery-bind-address=127.0.0.1:8090", "--pprof-bind-address=0", "--leader-elect", "--url=:80"},
			nil, []string{"--discovery-bind-address=127.0.0.1:8090", "--pprof-bind-address=0", "--leader-elect", "--url=:80"}},
		{"a missing flag added, a present one not", []string{"--apiserver-secure-port=7443", "--b-bind-address=10.0.0.1"},
			[]string{"--apiserver-bind-address", "--b-bind-address"}, []string{"--apiserver-secure-port=7443", "--b-bind-address=10.0.0.1", "--apiserver-bind-address=127.244.1.7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, BindArgs(tt.args, addr, tt.add)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodLoopbackRoundTrip(t *testing.T) {
	lo, ok := PodLoopback(netip.MustParseAddr("10.244.2.9"))
	if !ok || lo != netip.MustParseAddr("127.244.2.9") {
		t.Errorf("PodLoopback(10.244.2.9) = %v, %v; want 127.244.2.9", lo, ok)
	}
	if back := podIPFor(lo); back != netip.MustParseAddr("10.244.2.9") {
		t.Errorf("podIPFor(%v) = %v", lo, back)
	}
	if _, ok := PodLoopback(netip.MustParseAddr("127.0.0.5")); ok {
		t.Error("an address outside the pod network has a pod loopback")
	}
	if _, err := podSubnetPool(0); err == nil {
		t.Error("subnet 0 accepted")
	}
}

func TestPickNode(t *testing.T) {
	node := func(name string, ready, cordoned bool, taints ...corev1.Taint) corev1.Node {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned, Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
	}
	app := map[string]string{"app": "op", "pod-template-hash": "a"}
	pod := func(name, node string, deleting bool, lbls map[string]string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: lbls}, Spec: corev1.PodSpec{NodeName: node}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	pending := pod("new", "", false, map[string]string{"app": "op", "pod-template-hash": "b"})
	pending.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{TopologyKey: "kubernetes.io/hostname",
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "op"}}}}
	notReadyTaint := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name  string
		nodes []corev1.Node
		pods  []corev1.Pod
		want  string
	}{
		{"fewest pods of the spread selector, across template versions", []corev1.Node{node("a", true, false), node("b", true, false)},
			[]corev1.Pod{pod("x", "a", false, app)}, "b"},
		{"a pod being deleted does not count", []corev1.Node{node("a", true, false), node("b", true, false)},
			[]corev1.Pod{pod("x", "a", true, app), pod("y", "b", false, app)}, "a"},
		{"ties: the smallest name", []corev1.Node{node("b", true, false), node("a", true, false)}, nil, "a"},
		{"cordoned, not Ready or tainted nodes are skipped", []corev1.Node{node("a", true, true), node("b", false, false), node("c", true, false, notReadyTaint), node("d", true, false)},
			[]corev1.Pod{pod("x", "d", false, app), pod("y", "d", false, app)}, "d"},
		{"other namespaces and labels do not count", []corev1.Node{node("a", true, false), node("b", true, false)},
			[]corev1.Pod{pod("x", "a", false, map[string]string{"app": "other"}), {ObjectMeta: metav1.ObjectMeta{Name: "z", Namespace: "elsewhere", Labels: app}, Spec: corev1.PodSpec{NodeName: "a"}}}, "a"},
		{"nowhere to go", []corev1.Node{node("a", true, true)}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PickNode(&pending, tt.nodes, tt.pods); got != tt.want {
				t.Errorf("PickNode = %q, want %q", got, tt.want)
			}
		})
	}
	tolerating := pending.DeepCopy()
	tolerating.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if got := PickNode(tolerating, []corev1.Node{node("c", true, false, notReadyTaint)}, nil); got != "c" {
		t.Errorf("a pod tolerating the taint: PickNode = %q, want c", got)
	}
}

func TestExpandArgs(t *testing.T) {
	env := []string{"SQUID_IMAGE=registry.example/squid:v1", "EMPTY="}
	got := expandArgs([]string{"--kubernetes-pod-image=$(SQUID_IMAGE)", "$(EMPTY)x", "$$(SQUID_IMAGE)", "$(MISSING)", "$(UNCLOSED", "a$b"}, env)
	want := []string{"--kubernetes-pod-image=registry.example/squid:v1", "x", "$(SQUID_IMAGE)", "$(MISSING)", "$(UNCLOSED", "a$b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("expandArgs (-want +got):\n%s", diff)
	}
}
