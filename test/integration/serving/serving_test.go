// Package serving tests the serving label (pkg/serving) against a real
// kube-apiserver, each Labeller acting as the operator's ServiceAccount with
// the generated RBAC: the leader labels its pod, a standby labels itself the
// moment the leader's pod is being deleted, the leader being deleted leaves
// the Services to it before its servers stop, the new leader takes the label
// from a crashed one.
package serving

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/artifacts/rbac"
	"github.com/proxy-operator/proxy-operator/pkg/serving"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

const ns = "proxy-operator-system"

// shutdownDelay and successorWait are short here; the order is what counts.
const (
	shutdownDelay = 700 * time.Millisecond
	successorWait = 1500 * time.Millisecond
)

type replica struct {
	pod     string
	serving atomic.Bool
	stop    context.CancelFunc
	done    chan error
	// server stands for the replica's lease servers, held by its Labeller.
	server *server
}

// server is a Runnable that serves until its context ends.
type server struct {
	ended   chan struct{}
	endedAt time.Time
}

func (s *server) Start(ctx context.Context) error {
	<-ctx.Done()
	s.endedAt = time.Now()
	close(s.ended)
	return nil
}

// stopAndWaitServer stops r's replica (its manager's context ends) and
// returns how long its server kept running and the pods' state the moment
// it stopped.
func (r *replica) stopAndWaitServer(t *testing.T, kube kubernetes.Interface, pods map[string]string) (time.Duration, map[string]string) {
	t.Helper()
	at := time.Now()
	r.stop()
	select {
	case <-r.server.ended:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: its server still runs 20s after the stop", r.pod)
	}
	return r.server.endedAt.Sub(at), state(t, kube, pods)
}

func TestServingLabel(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{SkipCRDs: true})
	admin, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	role, err := rbac.FS.ReadFile("role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.ApplyYAML(ctx, cp.RESTConfig(), role); err != nil {
		t.Fatal(err)
	}
	must(admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "proxy-operator"}}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "proxy-operator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "proxy-operator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "proxy-operator", Namespace: ns}}}, metav1.CreateOptions{}))
	// Only the generated Role: a missing verb fails the Labeller here.
	asOperator := rest.CopyConfig(cp.RESTConfig())
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":proxy-operator"}
	kube, err := kubernetes.NewForConfig(asOperator)
	if err != nil {
		t.Fatal(err)
	}

	// A bystander in the namespace that the selector leaves alone.
	createPod(t, admin, "bystander", map[string]string{"app": "other", serving.LabelKey: serving.LabelValue})
	start := func(name string) *replica {
		createPod(t, admin, name, map[string]string{"app.kubernetes.io/name": "proxy-operator"})
		r := &replica{pod: name, done: make(chan error, 2), server: &server{ended: make(chan struct{})}}
		o := serving.NewOptions()
		o.Namespace, o.PodName, o.Resync = ns, name, 100*time.Millisecond
		o.ShutdownDelay, o.SuccessorWait = shutdownDelay, successorWait
		l, err := serving.New(o, kube, r.serving.Load, clock.RealClock{})
		if err != nil {
			t.Fatal(err)
		}
		var rctx context.Context
		rctx, r.stop = context.WithCancel(ctx)
		go func() { r.done <- l.Start(rctx) }()
		go func() { r.done <- l.Hold(r.server).Start(rctx) }()
		t.Cleanup(func() {
			r.stop()
			for range 2 {
				if err := <-r.done; err != nil {
					t.Errorf("labeller or server of %s: %v", name, err)
				}
			}
		})
		return r
	}
	a, b := start("operator-a"), start("operator-b")
	a.serving.Store(true)
	expect(t, admin, "a leads", map[string]string{"operator-a": "leader", "operator-b": "", "bystander": "label"})

	// A drain or a rollout deletes the leader's pod (a finalizer keeps it
	// terminating, as a kubelet does for its grace period); a still serves.
	must(admin.CoreV1().Pods(ns).Patch(ctx, "operator-a", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":["test/hold"]}}`), metav1.PatchOptions{}))
	must(nil, admin.CoreV1().Pods(ns).Delete(ctx, "operator-a", metav1.DeleteOptions{}))
	expect(t, admin, "b succeeds while a is terminating", map[string]string{"operator-a": "leader", "operator-b": "label", "bystander": "label"})
	hold(t, admin, 500*time.Millisecond, "a, terminating, leaves its successor the label", map[string]string{"operator-a": "leader", "operator-b": "label"})

	// a's process is told to stop (SIGTERM) while it still leads: it leaves
	// the Services to b, and only then, shutdownDelay later, do its servers
	// stop listening. Were they first, the Services would still send
	// connections to a pod that refuses them.
	took, pods := a.stopAndWaitServer(t, admin, map[string]string{"operator-a": "", "operator-b": ""})
	if want := map[string]string{"operator-a": "", "operator-b": "label"}; fmt.Sprint(pods) != fmt.Sprint(want) {
		t.Errorf("when a's servers stopped the pods were %v, want %v: a must leave the Services first", pods, want)
	}
	if took < shutdownDelay {
		t.Errorf("a's servers stopped %s after the stop, want at least the shutdown delay %s", took, shutdownDelay)
	}

	// a hands over: its gate closes, b takes over.
	a.serving.Store(false)
	b.serving.Store(true)
	expect(t, admin, "b leads, a is unlabelled", map[string]string{"operator-a": "", "operator-b": "leader", "bystander": "label"})
	must(admin.CoreV1().Pods(ns).Patch(ctx, "operator-a", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}))

	// b crashes: its process is gone, its pod stays Ready and labelled. c,
	// the new standby, leaves it alone until it leads; then takes the label.
	// (b's pod is not being deleted: no successor comes, b keeps its label.)
	c := start("operator-c")
	took, pods = b.stopAndWaitServer(t, admin, map[string]string{"operator-b": ""})
	if pods["operator-b"] != "leader" || took < shutdownDelay || took >= successorWait {
		t.Errorf("b, stopped in place, had %q when its servers stopped %s later; want it labelled, after the shutdown delay %s and without waiting for a successor (%s)",
			pods["operator-b"], took, shutdownDelay, successorWait)
	}
	hold(t, admin, 500*time.Millisecond, "c is a standby beside a live leader's pod", map[string]string{"operator-b": "leader", "operator-c": ""})
	c.serving.Store(true)
	expect(t, admin, "c leads and took b's label", map[string]string{"operator-b": "", "operator-c": "leader", "bystander": "label"})

	// c is deleted with no live peer to succeed it (b's process is gone):
	// it waits successorWait for one, keeps its label (the Services keep an
	// endpoint), and its servers stop after that and the shutdown delay.
	must(admin.CoreV1().Pods(ns).Patch(ctx, "operator-c", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":["test/hold"]}}`), metav1.PatchOptions{}))
	must(nil, admin.CoreV1().Pods(ns).Delete(ctx, "operator-c", metav1.DeleteOptions{}))
	took, pods = c.stopAndWaitServer(t, admin, map[string]string{"operator-c": ""})
	if pods["operator-c"] != "leader" || took < successorWait+shutdownDelay {
		t.Errorf("c, deleted without a successor, had %q when its servers stopped %s later; want it labelled, after %s and %s",
			pods["operator-c"], took, successorWait, shutdownDelay)
	}
	must(admin.CoreV1().Pods(ns).Patch(ctx, "operator-c", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}))
}

func createPod(t *testing.T, kube kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	p, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "proxy-operator:dev"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No kubelet here: mark it Ready as one would.
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// state reads each named pod's serving state: "leader" (label and
// annotation), "label" (label alone) or "".
func state(t *testing.T, kube kubernetes.Interface, names map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for name := range names {
		p, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case p.Labels[serving.LabelKey] == serving.LabelValue && p.Annotations[serving.LeaderAnnotation] == serving.LabelValue:
			got[name] = "leader"
		case p.Labels[serving.LabelKey] == serving.LabelValue:
			got[name] = "label"
		default:
			got[name] = ""
		}
	}
	return got
}

func expect(t *testing.T, kube kubernetes.Interface, what string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := state(t, kube, want)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: pods %v, want %v", what, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hold checks that want stays true for d (nobody undoes it).
func hold(t *testing.T, kube kubernetes.Interface, d time.Duration, what string, want map[string]string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := state(t, kube, want); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: pods %v, want %v", what, got, want)
		}
	}
}
