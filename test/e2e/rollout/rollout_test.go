package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

const ns = "proxy-operator-system"

// readiness is what the kubelet stand-in reports.
type readiness int

const (
	// everyPodReady: both replicas Ready (the probe /readyz?exclude=leases).
	everyPodReady readiness = iota
	// leaderOnlyReady: only the leader Ready (the old probe, /readyz with
	// the leases check): the leader stays so until its pod is deleted, then
	// the oldest remaining pod takes over.
	leaderOnlyReady
)

type env struct {
	cp   *controlplane.ControlPlane
	kube kubernetes.Interface
}

func setup(t *testing.T) *env {
	t.Helper()
	cp := controlplane.StartForTest(t, controlplane.Options{SkipCRDs: true, ControllerManager: true})
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &env{cp: cp, kube: kube}
}

// kubectlRun runs bin/kubectl against the control plane.
func (e *env) kubectlRun(ctx context.Context, stdin []byte, args ...string) (string, error) {
	return e.cp.Kubectl(ctx, stdin, args...)
}

// apply renders the base install and applies it, after replacing each
// (old, new) pair once (the negative control's older manifests).
func (e *env) apply(t *testing.T, replace ...string) {
	t.Helper()
	ctx := context.Background()
	y, err := e.kubectlRun(ctx, nil, "kustomize", "artifacts/install/base")
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, y)
	}
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(y, replace[i]) {
			t.Fatalf("the install no longer contains %q", replace[i])
		}
		y = strings.Replace(y, replace[i], replace[i+1], 1)
	}
	if out, err := e.kubectlRun(ctx, []byte(y), "apply", "-f", "-"); err != nil {
		// The APIService and the CRDs' status may need a second pass on a
		// fresh cluster; a real failure fails again.
		if out2, err2 := e.kubectlRun(ctx, []byte(y), "apply", "-f", "-"); err2 != nil {
			t.Fatalf("kubectl apply: %v\n%s\n%s", err2, out, out2)
		}
	}
}

// kubelet reports the readiness of the operator's pods as policy says and
// ends a deleted pod's containers at once, until ctx ends.
func (e *env) kubelet(ctx context.Context, t *testing.T, policy readiness) {
	leader := ""
	go func() {
		for ctx.Err() == nil {
			list, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=proxy-operator"})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			pods := list.Items
			slices.SortFunc(pods, func(a, b corev1.Pod) int {
				if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
					return c
				}
				return strings.Compare(a.Name, b.Name)
			})
			alive := func(name string) bool {
				return slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == name && p.DeletionTimestamp == nil })
			}
			if !alive(leader) {
				leader = ""
				for _, p := range pods {
					if p.DeletionTimestamp == nil {
						leader = p.Name
						break
					}
				}
			}
			for i := range pods {
				p := &pods[i]
				if p.DeletionTimestamp != nil {
					// The containers stop; the kubelet confirms the deletion.
					_ = e.kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
					continue
				}
				ready := policy == everyPodReady || p.Name == leader
				if p.Status.Phase == corev1.PodRunning && isReady(p) == ready {
					continue
				}
				st := corev1.ConditionFalse
				if ready {
					st = corev1.ConditionTrue
				}
				now := metav1.Now()
				p.Status.Phase = corev1.PodRunning
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
					{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now}}
				if _, err := e.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					t.Logf("kubelet stand-in: %v", err)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rolloutRestart runs `kubectl rollout restart` and `kubectl rollout
// status` with timeout, returning status's error.
func (e *env) rolloutRestart(t *testing.T, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	ctx := context.Background()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := e.kube.AppsV1().Deployments(ns).Get(ctx, "proxy-operator", metav1.GetOptions{})
		return err == nil && d.Status.UpdatedReplicas == 2 && d.Status.Replicas == 2, nil
	}); err != nil {
		t.Fatalf("the Deployment never made its two pods: %v", err)
	}
	if out, err := e.kubectlRun(ctx, nil, "-n", ns, "rollout", "restart", "deployment/proxy-operator"); err != nil {
		t.Fatalf("kubectl rollout restart: %v\n%s", err, out)
	}
	start := time.Now()
	out, err := e.kubectlRun(ctx, nil, "-n", ns, "rollout", "status", "deployment/proxy-operator", "--timeout="+timeout.String())
	if err != nil {
		return time.Since(start), fmt.Errorf("%w: %s", err, out)
	}
	return time.Since(start), nil
}

// evictReady asks the eviction API (what kubectl drain calls) to evict a
// Ready pod (under leaderOnlyReady, the leader's), retrying a refusal for up
// to within; it returns the last refusal.
func (e *env) evictReady(t *testing.T, within time.Duration) error {
	t.Helper()
	ctx := context.Background()
	var last error
	deadline := time.Now().Add(within)
	for {
		list, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=proxy-operator"})
		if err != nil {
			t.Fatal(err)
		}
		pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil || !isReady(&p) })
		if len(pods) > 0 {
			last = e.kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods[0].Name, Namespace: ns}})
			if last == nil {
				return nil
			}
			if !apierrors.IsTooManyRequests(last) {
				t.Fatalf("eviction of %s: %v", pods[0].Name, last)
			}
		}
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// The shipped install rolls and drains: both pods Ready, `kubectl rollout
// restart` finishes, and a drain's eviction of the leader is allowed (and
// its replacement follows).
func TestInstallRollsAndDrains(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.kubelet(ctx, t, everyPodReady)
	e.apply(t)

	took, err := e.rolloutRestart(t, 90*time.Second)
	if err != nil {
		t.Fatalf("kubectl rollout status: %v", err)
	}
	t.Logf("rollout restart finished in %s", took.Round(100*time.Millisecond))
	rs, err := e.kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=proxy-operator"})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int32
	for _, r := range rs.Items {
		sizes = append(sizes, ptr.Deref(r.Spec.Replicas, -1))
	}
	slices.Sort(sizes)
	if diff := fmt.Sprint(sizes); diff != "[0 2]" {
		t.Errorf("ReplicaSets after the rollout: sizes %s, want the old one at 0 and the new at 2", diff)
	}
	if err := e.evictReady(t, 30*time.Second); err != nil {
		t.Fatalf("a drain could not evict the leader's pod: %v", err)
	}
	// The Deployment replaces it; both Ready again.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := e.kube.AppsV1().Deployments(ns).Get(ctx, "proxy-operator", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 2 && d.Status.AvailableReplicas == 2, nil
	}); err != nil {
		t.Fatalf("the evicted pod was not replaced: %v", err)
	}
}

// Negative control: the install as it was (one Ready pod, maxSurge 0 and
// maxUnavailable 1) stalls its rollout and refuses the drain, and the same
// checks say so.
func TestOldInstallStallsAndBlocksDrains(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.kubelet(ctx, t, leaderOnlyReady)
	e.apply(t, "maxSurge: 1", "maxSurge: 0", "maxUnavailable: 0", "maxUnavailable: 1")

	if err := e.evictReady(t, 5*time.Second); err == nil {
		t.Error("the old install let a drain evict its only Ready pod; the drain check would not catch a blocked drain")
	}
	if _, err := e.rolloutRestart(t, 20*time.Second); err == nil {
		t.Error("the old install's rollout finished; the rollout check would not catch a stalled one")
	}
}
