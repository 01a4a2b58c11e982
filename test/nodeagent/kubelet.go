package nodeagent

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// HostIP is the node address the agent reports: every squid is on loopback.
const HostIP = "127.0.0.1"

// nodeLeaseNamespace is where kubelets keep their heartbeat Leases.
const nodeLeaseNamespace = "kube-node-lease"

// nodeLeaseDuration is the Lease's validity; a multiple of the renew
// interval, as the kubelet does (40s for 10s).
const nodeLeaseDuration = 40

// registerNode creates the Node, or takes over an existing one, and reports
// it Ready.
func (a *Agent) registerNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.opts.NodeName,
			Labels: map[string]string{
				"kubernetes.io/hostname": a.opts.NodeName,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     runtime.GOARCH,
			},
		},
	}
	created, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		created, err = a.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", node.Name, err)
		}
	case err != nil:
		return fmt.Errorf("registering node %s: %w", node.Name, err)
	}
	return a.updateNodeStatus(ctx, created)
}

// updateNodeStatus writes a Ready node status with a fresh heartbeat. node,
// when given, is the Node as last read; a conflict (the node lifecycle
// controller tainting a new Node, say) is retried on a fresh read.
func (a *Agent) updateNodeStatus(ctx context.Context, node *corev1.Node) error {
	// New Nodes are busy: the node lifecycle controller taints and annotates
	// them in their first second.
	backoff := wait.Backoff{Steps: 10, Duration: 50 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Cap: 2 * time.Second}
	return retry.OnError(backoff, apierrors.IsConflict, func() error {
		if node == nil {
			var err error
			node, err = a.client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading node %s: %w", a.opts.NodeName, err)
			}
		}
		updated := node.DeepCopy()
		node = nil
		updated.Status = NodeStatus(a.opts.NodeName, a.pool.Size(), metav1.NewTime(a.opts.Clock.Now()), updated.Status.Conditions)
		if _, err := a.client.CoreV1().Nodes().UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating node %s status: %w", updated.Name, err)
		}
		return nil
	})
}

// NodeStatus is the status the agent reports for its Node: Ready, loopback
// addresses, a pod capacity equal to its address pool. The Ready condition's
// transition time is kept from old when it was already True.
func NodeStatus(nodeName string, pods int, now metav1.Time, old []corev1.NodeCondition) corev1.NodeStatus {
	transition := now
	for _, c := range old {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			transition = c.LastTransitionTime
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type:               corev1.NodeReady,
			Status:             corev1.ConditionTrue,
			Reason:             "KubeletReady",
			Message:            "proxy-operator node agent is posting ready status",
			LastHeartbeatTime:  now,
			LastTransitionTime: transition,
		}},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: HostIP},
			{Type: corev1.NodeHostName, Address: nodeName},
		},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
			KubeletVersion:          "v0.0.0-nodeagent",
			ContainerRuntimeVersion: "nodeagent://squid",
		},
	}
}

// renewLease creates or renews the node's heartbeat Lease.
func (a *Agent) renewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(nodeLeaseNamespace)
	now := metav1.NewMicroTime(a.opts.Clock.Now())
	lease, err := leases.Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName, Namespace: nodeLeaseNamespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(a.opts.NodeName),
				LeaseDurationSeconds: ptr.To[int32](nodeLeaseDuration),
				RenewTime:            &now,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node lease: %w", err)
	}
	lease.Spec.HolderIdentity = ptr.To(a.opts.NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](nodeLeaseDuration)
	lease.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing node lease: %w", err)
	}
	return nil
}

// heartbeat renews the Lease and refreshes the Ready condition until ctx ends.
func (a *Agent) heartbeat(ctx context.Context) {
	leaseTick := a.opts.Clock.NewTicker(a.opts.LeaseInterval)
	defer leaseTick.Stop()
	statusTick := a.opts.Clock.NewTicker(a.opts.NodeStatusInterval)
	defer statusTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-leaseTick.C():
			if err := a.renewLease(ctx); err != nil && ctx.Err() == nil {
				a.log.Error(err, "renewing node lease")
			}
		case <-statusTick.C():
			if err := a.updateNodeStatus(ctx, nil); err != nil && ctx.Err() == nil {
				a.log.Error(err, "updating node status")
			}
		}
	}
}

// bind assigns an unscheduled pod to the agent's node, as a scheduler does.
func (a *Agent) bind(ctx context.Context, pod *corev1.Pod) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: a.opts.NodeName},
	}
	err := a.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case err == nil:
		a.log.Info("pod bound", "pod", pod.Namespace+"/"+pod.Name)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or bound by someone else meanwhile; the watch brings the
		// news.
		return nil
	default:
		return fmt.Errorf("binding pod: %w", err)
	}
}

// confirmDeletion finishes a graceful deletion once squid is stopped, the way
// a kubelet does: a delete with grace period 0, guarded by the pod's UID so a
// successor of the same name is never hit. Finalizers are left to whoever set
// them.
func (a *Agent) confirmDeletion(ctx context.Context, pod *corev1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	switch {
	case err == nil:
		a.log.Info("pod deletion confirmed", "pod", pod.Namespace+"/"+pod.Name)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("confirming pod deletion: %w", err)
	}
}

// writeStatus reports inst on pod when the pod's status says otherwise.
func (a *Agent) writeStatus(ctx context.Context, pod *corev1.Pod, inst *instance) error {
	a.mu.Lock()
	obs := Observation{
		Addr:       inst.addr,
		Listening:  inst.listening,
		StartedAt:  metav1.NewTime(inst.startedAt),
		FailReason: inst.failReason,
		FailMsg:    inst.failMsg,
		ExitCode:   inst.exitCode,
		FinishedAt: metav1.NewTime(inst.finishedAt),
	}
	if inst.squid != nil {
		obs.PID = inst.squid.PID()
	}
	a.mu.Unlock()
	status, changed := PodStatus(pod, obs)
	if !changed {
		return nil
	}
	updated := pod.DeepCopy()
	updated.Status = status
	if _, err := a.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing pod status (phase %s): %w", status.Phase, err)
	}
	a.log.Info("pod status written", "pod", pod.Namespace+"/"+pod.Name, "phase", status.Phase, "podIP", status.PodIP)
	return nil
}

// Observation is what the agent knows about a pod's squid.
type Observation struct {
	Addr       netip.Addr
	PID        int
	Listening  bool
	StartedAt  metav1.Time
	FailReason string // non-empty: failed for good
	FailMsg    string
	ExitCode   int32
	FinishedAt metav1.Time
}

// PodStatus returns the status a kubelet would report for pod given obs, and
// whether it differs from the pod's current status in a way worth a write:
// Failed once obs failed; Running with the pod IP once squid listens; no
// change while squid starts.
func PodStatus(pod *corev1.Pod, obs Observation) (corev1.PodStatus, bool) {
	cur := pod.Status
	switch {
	case obs.FailReason != "":
		if cur.Phase == corev1.PodFailed {
			return cur, false
		}
		return failedStatus(pod, obs), true
	case obs.Listening:
		if cur.Phase == corev1.PodRunning && cur.PodIP == obs.Addr.String() && podReady(&cur) {
			return cur, false
		}
		return runningStatus(pod, obs), true
	default:
		return cur, false
	}
}

func runningStatus(pod *corev1.Pod, obs Observation) corev1.PodStatus {
	s := running(pod, obs.Addr.String(), obs.StartedAt)
	s.Conditions = conditions(obs.StartedAt, corev1.ConditionTrue, "", "")
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ImageID:     "nodeagent://" + c.Image,
			ContainerID: fmt.Sprintf("nodeagent://%d", obs.PID),
			Ready:       true,
			Started:     ptr.To(true),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: obs.StartedAt}},
		})
	}
	return s
}

// running is pod's status as Running on ip, started at startedAt (unless it
// says an earlier start); conditions and container statuses are the
// caller's.
func running(pod *corev1.Pod, ip string, startedAt metav1.Time) corev1.PodStatus {
	s := *pod.Status.DeepCopy()
	s.Phase = corev1.PodRunning
	s.Reason, s.Message = "", ""
	s.HostIP, s.HostIPs = HostIP, []corev1.HostIP{{IP: HostIP}}
	s.PodIP, s.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	if s.StartTime == nil {
		s.StartTime = ptr.To(startedAt)
	}
	return s
}

func failedStatus(pod *corev1.Pod, obs Observation) corev1.PodStatus {
	s := *pod.Status.DeepCopy()
	s.Phase = corev1.PodFailed
	s.Message = obs.FailMsg
	if s.HostIP == "" {
		s.HostIP, s.HostIPs = HostIP, []corev1.HostIP{{IP: HostIP}}
	}
	if s.StartTime == nil && !obs.StartedAt.IsZero() {
		s.StartTime = ptr.To(obs.StartedAt)
	}
	s.Conditions = conditions(obs.FinishedAt, corev1.ConditionFalse, "PodFailed", obs.FailMsg)
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		var containerID string
		if obs.PID > 0 {
			containerID = fmt.Sprintf("nodeagent://%d", obs.PID)
		}
		s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ImageID:     "nodeagent://" + c.Image,
			ContainerID: containerID,
			Started:     ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode:    obs.ExitCode,
				Reason:      obs.FailReason,
				Message:     obs.FailMsg,
				StartedAt:   obs.StartedAt,
				FinishedAt:  obs.FinishedAt,
				ContainerID: containerID,
			}},
		})
	}
	return s
}

// conditions are the kubelet's pod conditions with Ready and ContainersReady
// set to ready.
func conditions(at metav1.Time, ready corev1.ConditionStatus, reason, msg string) []corev1.PodCondition {
	cond := func(t corev1.PodConditionType, st corev1.ConditionStatus, reason, msg string) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: st, LastTransitionTime: at, Reason: reason, Message: msg}
	}
	return []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", ""),
		cond(corev1.PodInitialized, corev1.ConditionTrue, "", ""),
		cond(corev1.PodReady, ready, reason, msg),
		cond(corev1.ContainersReady, ready, reason, msg),
		cond(corev1.PodScheduled, corev1.ConditionTrue, "", ""),
	}
}

func podReady(s *corev1.PodStatus) bool {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
