package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	k8sprovider "github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

const (
	testNamespace = "nodeagent-test"
	testNode      = "nodeagent-test-node"
	waitTimeout   = 30 * time.Second
)

// env is one control plane with a running agent.
type env struct {
	t      *testing.T
	cs     kubernetes.Interface
	prov   *k8sprovider.Provider
	agent  *nodeagent.Agent
	stop   func() // stops the agent and waits for Run to return
	cp     *controlplane.ControlPlane
	target *httptest.Server
}

// The pool of this package's integration tests; other packages' agents use
// other ranges so `go test ./...` can run them side by side.
var (
	poolFirst = netip.MustParseAddr("127.0.4.2")
	poolLast  = netip.MustParseAddr("127.0.4.60")
)

func startAgent(t *testing.T, cp *controlplane.ControlPlane, bind bool) (*nodeagent.Agent, func()) {
	t.Helper()
	agent, err := nodeagent.New(cp.RESTConfig(), nodeagent.Options{
		NodeName:      testNode,
		Tag:           provider.DefaultTag, // the other-tag case checks the filter
		Log:           testr.New(t),
		Bind:          bind,
		PoolFirst:     poolFirst,
		PoolLast:      poolLast,
		LeaseInterval: time.Second,
	})
	if err != nil {
		t.Fatalf("nodeagent.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	var once bool
	stop := func() {
		if once {
			return
		}
		once = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("agent Run did not return within 30s of cancel")
		}
	}
	t.Cleanup(stop)
	select {
	case <-agent.Ready():
	case err := <-done:
		t.Fatalf("agent Run returned before it was ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("agent not ready within the timeout")
	}
	return agent, stop
}

func setup(t *testing.T) *env {
	t.Helper()
	if _, err := nodeagent.LookSquid(""); err != nil {
		t.Fatalf("%v (these tests need Debian's squid)", err)
	}
	cp := controlplane.StartForTest(t, controlplane.Options{})
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prov, err := k8sprovider.New(c, k8sprovider.Options{NodeName: testNode})
	if err != nil {
		t.Fatal(err)
	}
	agent, stop := startAgent(t, cp, true)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "target says hi; via=%s", r.Header.Get("Via"))
	}))
	t.Cleanup(target.Close)
	return &env{t: t, cs: cs, prov: prov, agent: agent, stop: stop, cp: cp, target: target}
}

// createPod creates a pod the way the operator does, through the provider.
func (e *env) createPod(cloudInit string) (name string, uid types.UID) {
	e.t.Helper()
	owner := uuid.NewUUID()
	name = provider.NameFromUID(owner)
	_, err := e.prov.Create(e.t.Context(), provider.CreateRequest{
		Name: name, Tag: provider.DefaultTag, OwnerUID: owner, Namespace: testNamespace, CloudInit: cloudInit,
	})
	if err != nil {
		e.t.Fatalf("creating pod: %v", err)
	}
	pod, err := e.cs.CoreV1().Pods(testNamespace).Get(e.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return name, pod.UID
}

// waitPod polls the pod until cond holds and returns it.
func (e *env) waitPod(name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	e.t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(e.t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pod, err := e.cs.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = pod
		return cond(pod), nil
	})
	if err != nil {
		e.t.Fatalf("waiting for pod %s to be %s: %v; last status: %+v", name, what, err, statusOf(last))
	}
	return last
}

func statusOf(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

// waitGone polls until the pod is NotFound.
func (e *env) waitGone(name string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		e.t.Fatalf("waiting for pod %s to be gone: %v", name, err)
	}
}

func waitProcessGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for nodeagent.ProcessAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("squid %d still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isRunning(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
}

// fetchThrough GETs url through the proxy at host:port.
func fetchThrough(proxyHostPort, target string) (int, string, error) {
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxyHostPort}), DisableKeepAlives: true}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(target)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestAgentRunsSquidForPods(t *testing.T) {
	e := setup(t)
	ctx := t.Context()

	// The node is registered Ready and its Lease renewed.
	node, err := e.cs.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node not registered: %v", err)
	}
	if len(node.Status.Conditions) == 0 || node.Status.Conditions[0].Type != corev1.NodeReady || node.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("node conditions = %+v, want Ready True", node.Status.Conditions)
	}
	lease, err := e.cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node lease: %v", err)
	}
	firstRenew := lease.Spec.RenewTime.Time

	// A pod like the operator's becomes Running on a loopback IP of the pool.
	const userData = "#cloud-config\nwrite_files: []\n"
	name, uid := e.createPod(userData)
	pod := e.waitPod(name, "Running", isRunning)
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || ip.Less(poolFirst) || poolLast.Less(ip) {
		t.Fatalf("pod IP %q outside the pool %v-%v", pod.Status.PodIP, poolFirst, poolLast)
	}
	if pod.Status.HostIP != nodeagent.HostIP || !podConditionTrue(pod, corev1.PodReady) {
		t.Errorf("status = hostIP %q, conditions %+v; want hostIP %s and Ready", pod.Status.HostIP, pod.Status.Conditions, nodeagent.HostIP)
	}
	if n := len(pod.Status.ContainerStatuses); n != 1 || pod.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("container statuses = %+v, want one running", pod.Status.ContainerStatuses)
	}
	inst, ok := e.agent.Instance(testNamespace, name)
	if !ok || inst.UID != uid || inst.PID == 0 || inst.Addr != ip {
		t.Fatalf("agent instance = %+v (found %v), want pid and addr %v for uid %s", inst, ok, ip, uid)
	}
	got, err := os.ReadFile(filepath.Join(inst.Dir, nodeagent.UserDataFile))
	if err != nil || string(got) != userData {
		t.Errorf("user data delivered = (%q, %v), want %q", got, err, userData)
	}

	// The squid at podIP:3128 forwards to a local server.
	code, body, err := fetchThrough(pod.Status.PodIP+":3128", e.target.URL)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "target says hi") || !strings.Contains(body, "squid") {
		t.Fatalf("GET through %s:3128 = (%d, %q, %v), want 200 from the target via squid", pod.Status.PodIP, code, body, err)
	}

	// Squid dies → the pod is Failed with the exit code, and stays Failed.
	if err := syscall.Kill(inst.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failed := e.waitPod(name, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	term := failed.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 128+int32(syscall.SIGKILL) || term.Reason != nodeagent.ReasonSquidExited {
		t.Errorf("terminated state = %+v, want exit code %d reason %s", term, 128+int(syscall.SIGKILL), nodeagent.ReasonSquidExited)
	}
	if podConditionTrue(failed, corev1.PodReady) {
		t.Error("a Failed pod is still Ready")
	}
	// The agent then lets go of the terminal pod's instance.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		_, ok := e.agent.Instance(testNamespace, name)
		return !ok, nil
	}); err != nil {
		t.Errorf("agent still holds the failed pod's instance: %v", err)
	}
	if _, err := os.Stat(inst.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("instance dir of the failed pod: %v, want removed", err)
	}

	// Deleting a Running pod stops its squid and completes the deletion.
	name2, _ := e.createPod("")
	pod2 := e.waitPod(name2, "Running", isRunning)
	if pod2.Status.PodIP == pod.Status.PodIP {
		t.Errorf("second pod reuses the first pod's IP %s while others are free", pod2.Status.PodIP)
	}
	inst2, ok := e.agent.Instance(testNamespace, name2)
	if !ok {
		t.Fatal("agent does not know the second pod")
	}
	if _, err := os.Stat(filepath.Join(inst2.Dir, nodeagent.UserDataFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("user-data file without cloud-init data: %v, want none", err)
	}
	if err := e.prov.Delete(ctx, k8sprovider.ProviderID(testNamespace, name2)); err != nil {
		t.Fatal(err)
	}
	e.waitGone(name2)
	waitProcessGone(t, inst2.PID)
	if nodeagent.PortFree(pod2.Status.PodIP+":3128") == false {
		t.Errorf("%s:3128 still served after the pod's deletion", pod2.Status.PodIP)
	}

	// The failed pod's deletion is confirmed too.
	if err := e.prov.Delete(ctx, k8sprovider.ProviderID(testNamespace, name)); err != nil {
		t.Fatal(err)
	}
	e.waitGone(name)

	lease, err = e.cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, testNode, metav1.GetOptions{})
	if err != nil || !lease.Spec.RenewTime.After(firstRenew) {
		t.Errorf("lease not renewed: %v (renew %v, first %v)", err, lease.Spec.RenewTime, firstRenew)
	}
	if got := e.agent.Instances(); len(got) != 0 {
		t.Errorf("agent instances after all pods are gone: %+v", got)
	}
}

func podConditionTrue(p *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func TestAgentBindsOnlyItsPods(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	pods := e.cs.CoreV1().Pods(testNamespace)
	mk := func(name, node string, labels map[string]string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:   node,
				Containers: []corev1.Container{{Name: "squid", Image: k8sprovider.DefaultImage, Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 3128}}}},
			},
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tagged := map[string]string{provider.TagLabel: provider.DefaultTag}
	mk("unscheduled", "", tagged)
	mk("elsewhere", "another-node", tagged)
	mk("untagged", testNode, nil)
	mk("other-tag", "", map[string]string{provider.TagLabel: "someone-else"})

	// Unscheduled tagged pods are bound (Bind is on) and run.
	bound := e.waitPod("unscheduled", "bound and Running", isRunning)
	if bound.Spec.NodeName != testNode {
		t.Errorf("nodeName = %q, want %q", bound.Spec.NodeName, testNode)
	}
	// Negative controls: the others are never touched.
	for _, name := range []string{"elsewhere", "untagged", "other-tag"} {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodPending || (name == "other-tag" && p.Spec.NodeName != "") {
			t.Errorf("pod %s: phase %q node %q; the agent must leave it alone", name, p.Status.Phase, p.Spec.NodeName)
		}
		if _, ok := e.agent.Instance(testNamespace, name); ok {
			t.Errorf("agent runs squid for pod %s", name)
		}
	}

	// A replacement under the same name gets a new squid.
	inst, _ := e.agent.Instance(testNamespace, "unscheduled")
	if err := pods.Delete(ctx, "unscheduled", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("unscheduled")
	waitProcessGone(t, inst.PID)
	mk("unscheduled", testNode, tagged)
	again := e.waitPod("unscheduled", "Running again", isRunning)
	inst2, ok := e.agent.Instance(testNamespace, "unscheduled")
	if !ok || inst2.UID != again.UID || inst2.PID == inst.PID {
		t.Errorf("replacement instance = %+v, want a new squid for uid %s", inst2, again.UID)
	}
}

func TestAgentRestartFailsOrphanedPodsAndLeavesNoSquid(t *testing.T) {
	e := setup(t)
	name, _ := e.createPod("")
	e.waitPod(name, "Running", isRunning)
	inst, _ := e.agent.Instance(testNamespace, name)

	// Stopping the agent stops its squids.
	e.stop()
	waitProcessGone(t, inst.PID)
	if _, err := os.Stat(e.agent.BaseDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("agent base dir after Run returned: %v, want removed", err)
	}

	// A new agent finds the pod Running without a squid: it is Failed, not
	// silently restarted (restartPolicy Never; the operator replaces it).
	agent2, _ := startAgent(t, e.cp, true)
	failed := e.waitPod(name, "Failed after the agent restart", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if term := failed.Status.ContainerStatuses[0].State.Terminated; term == nil || term.Reason != nodeagent.ReasonNodeAgentRestarted {
		t.Errorf("terminated state = %+v, want reason %s", term, nodeagent.ReasonNodeAgentRestarted)
	}
	// The new agent keeps a record of the failure until its informer sees
	// the Failed status (then forgets it): a record is fine, a squid is not.
	if info, ok := agent2.Instance(testNamespace, name); ok && (info.PID != 0 || info.FailReason != nodeagent.ReasonNodeAgentRestarted) {
		t.Errorf("the new agent holds %+v for a pod that had already run; want no squid (at most the failure record)", info)
	}
	// A graceful deletion (30s grace) still completes at once.
	if err := e.cs.CoreV1().Pods(testNamespace).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(name)
}
