package nodeagent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodStatus(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	finished := metav1.NewTime(started.Add(time.Minute))
	pod := func(status corev1.PodStatus) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "proxy-a", Namespace: "team"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "squid", Image: "ubuntu/squid:x"}}},
			Status:     status,
		}
	}
	pending := corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable}
	listening := Observation{Addr: addr("127.0.0.7"), PID: 42, Listening: true, StartedAt: started}
	crashed := Observation{Addr: addr("127.0.0.7"), PID: 42, Listening: true, StartedAt: started,
		FailReason: ReasonSquidExited, FailMsg: "squid exited (signal: killed)", ExitCode: 137, FinishedAt: finished}

	running := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		QOSClass:  corev1.PodQOSBurstable,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     "127.0.0.7",
		PodIPs:    []corev1.PodIP{{IP: "127.0.0.7"}},
		StartTime: &started,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "squid", Image: "ubuntu/squid:x", ImageID: "nodeagent://ubuntu/squid:x", ContainerID: "nodeagent://42",
			Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}},
	}
	failed := corev1.PodStatus{
		Phase:     corev1.PodFailed,
		Message:   "squid exited (signal: killed)",
		QOSClass:  corev1.PodQOSBurstable,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     "127.0.0.7",
		PodIPs:    []corev1.PodIP{{IP: "127.0.0.7"}},
		StartTime: &started,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: finished},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: finished},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: finished, Reason: "PodFailed", Message: "squid exited (signal: killed)"},
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: finished, Reason: "PodFailed", Message: "squid exited (signal: killed)"},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: finished},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "squid", Image: "ubuntu/squid:x", ImageID: "nodeagent://ubuntu/squid:x", ContainerID: "nodeagent://42",
			Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "Error", Message: "squid exited (signal: killed)",
				StartedAt: started, FinishedAt: finished, ContainerID: "nodeagent://42",
			}},
		}},
	}

	tests := []struct {
		name        string
		cur         corev1.PodStatus
		obs         Observation
		want        corev1.PodStatus
		wantChanged bool
	}{
		{"squid starting: nothing to write", pending, Observation{Addr: addr("127.0.0.7"), PID: 42, StartedAt: started}, pending, false},
		{"squid listening: Running with the pod IP", pending, listening, running, true},
		{"already Running at that IP: no write", running, listening, running, false},
		{"Running at another IP (stale): rewrite", func() corev1.PodStatus {
			s := *running.DeepCopy()
			s.PodIP, s.PodIPs = "127.0.0.3", []corev1.PodIP{{IP: "127.0.0.3"}}
			return s
		}(), listening, running, true},
		{"squid died: Failed, keeps the IP it had", running, crashed, failed, true},
		{"already Failed: no write", failed, crashed, failed, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := PodStatus(pod(tc.cur), tc.obs)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PodStatus (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodStatusStartFailureWithoutSquid(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "squid", Image: "i"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	got, changed := PodStatus(pod, Observation{FailReason: ReasonOutOfAddresses, FailMsg: "pool exhausted", ExitCode: 128, StartedAt: at, FinishedAt: at})
	if !changed || got.Phase != corev1.PodFailed {
		t.Fatalf("PodStatus after a start failure = (%s, %v), want Failed and changed", got.Phase, changed)
	}
	if got.PodIP != "" || len(got.PodIPs) != 0 {
		t.Errorf("a pod that never ran got IP %q", got.PodIP)
	}
	cs := got.ContainerStatuses[0]
	if cs.ContainerID != "" || cs.State.Terminated == nil || cs.State.Terminated.Reason != ReasonOutOfAddresses {
		t.Errorf("container status = %+v, want terminated with reason %s and no container ID", cs, ReasonOutOfAddresses)
	}
}

func TestNodeStatusKeepsReadyTransitionTime(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	first := NodeStatus("n", 10, t0, nil)
	second := NodeStatus("n", 10, t1, first.Conditions)
	c := second.Conditions[0]
	if c.Type != corev1.NodeReady || c.Status != corev1.ConditionTrue {
		t.Fatalf("condition = %+v, want Ready True", c)
	}
	if !c.LastTransitionTime.Equal(&t0) || !c.LastHeartbeatTime.Equal(&t1) {
		t.Errorf("transition %v heartbeat %v, want transition %v (kept) heartbeat %v", c.LastTransitionTime, c.LastHeartbeatTime, t0, t1)
	}
	notReady := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: t0}}
	if got := NodeStatus("n", 10, t1, notReady).Conditions[0].LastTransitionTime; !got.Equal(&t1) {
		t.Errorf("NotReady→Ready transition time = %v, want %v", got, t1)
	}
	if got := second.Capacity[corev1.ResourcePods]; got.Value() != 10 {
		t.Errorf("pods capacity = %v, want 10", got.Value())
	}
}
