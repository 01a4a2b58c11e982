package nodeagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

const podsNS = "pods-test"

// podApp builds testdata/podapp, the container these pods run.
func podApp(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "podapp")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/podapp")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building podapp: %v\n%s", err, out)
	}
	return bin
}

func appPod(name, stateDir string) *corev1.Pod {
	probe := func(path string, failures int32, delay int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("probes")}},
			PeriodSeconds: 1, FailureThreshold: failures, InitialDelaySeconds: delay}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podsNS, Labels: map[string]string{"app": "podapp"}},
		Spec: corev1.PodSpec{
			ServiceAccountName:            "app",
			TerminationGracePeriodSeconds: ptr.To[int64](3),
			Containers: []corev1.Container{{
				Name: "app", Image: "example.com/podapp:dev",
				Args: []string{"--probe-bind-address=:9000", "--state-dir=" + stateDir},
				Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
				Ports:          []corev1.ContainerPort{{Name: "probes", ContainerPort: 9000}},
				ReadinessProbe: probe("/readyz", 1, 0),
				LivenessProbe:  probe("/healthz", 2, 2),
			}},
		},
	}
}

func lines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

// The agent runs a selected pod as a process with what a kubelet gives it
// (its own pod IP, hostname, service-account token, CA and namespace at the
// standard path, the downward API, an /etc/hosts), follows its probes
// (readiness into the pod's status, liveness into a restart), and ends it
// as the deletion says: SIGTERM, the grace period, SIGKILL; a force
// deletion kills it at once.
func TestAgentRunsPodsAsProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("pods run in mount namespaces: this test needs root")
	}
	bin := podApp(t)
	cp := controlplane.StartForTest(t, controlplane.Options{SkipCRDs: true})
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podsNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(podsNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agent, err := nodeagent.New(cp.RESTConfig(), nodeagent.Options{
		NodeName: "pods-node", Tag: "none", Log: testr.New(t), PoolFirst: poolFirst, PoolLast: poolLast,
		Pods: &nodeagent.PodOptions{Selector: labels.SelectorFromSet(labels.Set{"app": "podapp"}), Binary: bin, Subnet: 9, Bind: true,
			APIServer: cp.Host, CAFile: cp.CACertPath, BackOff: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- agent.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	// The node agent's Node carries the not-ready taint until a node
	// lifecycle controller lifts it; there is none here.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "pods-node", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		n.Spec.Taints = nil
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}

	state := t.TempDir()
	if _, err := cs.CoreV1().Pods(podsNS).Create(ctx, appPod("app-1", state), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitPod(t, cs, "app-1", func(p *corev1.Pod) bool { return p.Spec.NodeName == "pods-node" && podIsReady(p) })
	podIP := netip.MustParseAddr(pod.Status.PodIP)
	loop, ok := nodeagent.PodLoopback(podIP)
	if !ok || !netip.MustParsePrefix("10.244.9.0/24").Contains(podIP) {
		t.Fatalf("pod IP %s: want one of the node's subnet 10.244.9.0/24", podIP)
	}
	base := "http://" + net.JoinHostPort(loop.String(), "9000")

	// What the pod was given.
	resp, err := http.Get(base + "/pod")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ca, _ := os.ReadFile(cp.CACertPath)
	want := map[string]string{"hostname": "app-1", "podName": "app-1", "podIP": podIP.String(), "namespace": podsNS,
		"apiServer": strings.TrimPrefix(cp.Host, "https://"), "ca": string(ca)}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("the pod's %s = %q, want %q", k, got[k], v)
		}
	}
	if !strings.Contains(got["hosts"], "localhost") || !strings.Contains(got["hosts"], podIP.String()+"\tapp-1") {
		t.Errorf("the pod's /etc/hosts lacks localhost or its own name:\n%s", got["hosts"])
	}
	review, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: got["token"]}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.User; !review.Status.Authenticated || u.Username != "system:serviceaccount:"+podsNS+":app" || fmt.Sprint(u.Extra["authentication.kubernetes.io/pod-name"]) != "[app-1]" {
		t.Errorf("the pod's token: authenticated %v as %q (extra %v), want the ServiceAccount app bound to pod app-1 (%s)", review.Status.Authenticated, u.Username, u.Extra, review.Status.Error)
	}
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount"); err == nil {
		t.Error("the service-account directory leaked onto the host")
	}

	// readOnlyRootFilesystem: the root refuses writes in the pod (in the
	// host's too: the state directory), an emptyDir at /tmp takes them and
	// keeps them off the host. The pod without it writes anywhere.
	write := func(base, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + "/write?path=" + url.QueryEscape(path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if code, msg := write(base, filepath.Join(state, "rw")); code != http.StatusNoContent {
		t.Errorf("a pod with a writable root could not write its state directory: %d %s", code, msg)
	}
	roState := t.TempDir()
	ro := appPod("app-ro", roState)
	ro.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}
	ro.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	ro.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if _, err := cs.CoreV1().Pods(podsNS).Create(ctx, ro, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	roPod := waitPod(t, cs, "app-ro", func(p *corev1.Pod) bool { return p.Spec.NodeName == "pods-node" && podIsReady(p) })
	roLoop, _ := nodeagent.PodLoopback(netip.MustParseAddr(roPod.Status.PodIP))
	roBase := "http://" + net.JoinHostPort(roLoop.String(), "9000")
	// A directory of the root file system that no volume covers (the
	// checkout may lie under /tmp, which the emptyDir does).
	rootDir := "/var/tmp"
	if _, err := os.Stat(rootDir); err != nil {
		rootDir = "/"
	}
	onRoot := filepath.Join(rootDir, "podapp-"+string(roPod.UID))
	if code, msg := write(roBase, onRoot); code != http.StatusInternalServerError || !strings.Contains(msg, "read-only file system") {
		t.Errorf("a pod with a read-only root wrote to its root: %d %q, want 500 read-only file system", code, msg)
		_ = os.Remove(onRoot)
	}
	inTmp := "/tmp/podapp-" + string(roPod.UID)
	if code, msg := write(roBase, inTmp); code != http.StatusNoContent {
		t.Errorf("a pod with a read-only root could not write to its emptyDir at /tmp: %d %s", code, msg)
	}
	if _, err := os.Stat(inTmp); err == nil {
		t.Errorf("the pod's write to its emptyDir at /tmp reached the host's %s", inTmp)
		_ = os.Remove(inTmp)
	}
	if err := cs.CoreV1().Pods(podsNS).Delete(ctx, "app-ro", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}

	// Readiness follows the probe.
	touch(t, state, "unready")
	waitPod(t, cs, "app-1", func(p *corev1.Pod) bool { return !podIsReady(p) })
	rm(t, state, "unready")
	waitPod(t, cs, "app-1", podIsReady)

	// A failing liveness probe restarts the container.
	touch(t, state, "unhealthy")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return len(lines(filepath.Join(state, "starts"))) == 2, nil
	}); err != nil {
		t.Fatalf("the liveness failure did not restart the container: starts %v", lines(filepath.Join(state, "starts")))
	}
	rm(t, state, "unhealthy")
	waitPod(t, cs, "app-1", func(p *corev1.Pod) bool {
		return podIsReady(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1
	})

	// A graceful deletion: SIGTERM, then SIGKILL after the grace period
	// (the process ignores SIGTERM), then the deletion is confirmed.
	touch(t, state, "ignore-term")
	pid, _ := strconv.Atoi(lines(filepath.Join(state, "starts"))[1])
	start := time.Now()
	if err := cs.CoreV1().Pods(podsNS).Delete(ctx, "app-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(podsNS).Get(ctx, "app-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the deleted pod was never confirmed gone")
	}
	took := time.Since(start)
	// One SIGTERM ended the first process (the liveness restart), one this.
	if ev := lines(filepath.Join(state, "events")); len(ev) != 2 || ev[1] != "sigterm" {
		t.Errorf("events %v, want two SIGTERMs: the liveness restart's and the deletion's", ev)
	}
	if took < 3*time.Second || nodeagent.ProcessAlive(pid) {
		t.Errorf("the pod was gone after %s with its process alive=%v; want SIGKILL after the 3 s grace period", took, nodeagent.ProcessAlive(pid))
	}

	// A force deletion kills at once.
	state2 := t.TempDir()
	if _, err := cs.CoreV1().Pods(podsNS).Create(ctx, appPod("app-2", state2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, "app-2", podIsReady)
	touch(t, state2, "ignore-term")
	pid, _ = strconv.Atoi(lines(filepath.Join(state2, "starts"))[0])
	if err := cs.CoreV1().Pods(podsNS).Delete(ctx, "app-2", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
		return !nodeagent.ProcessAlive(pid), nil
	}); err != nil {
		t.Errorf("the force-deleted pod's process %d still runs", pid)
	}
	if ev := lines(filepath.Join(state2, "events")); len(ev) != 0 {
		t.Errorf("a force-deleted pod got %v; want a SIGKILL only", ev)
	}
}

func waitPod(t *testing.T, cs kubernetes.Interface, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(podsNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	}); err != nil {
		t.Fatalf("pod %s: the expected state never came; last status %+v", name, last.Status)
	}
	return last
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func touch(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
