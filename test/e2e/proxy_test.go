package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/framework"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

const (
	testNamespace = "e2e"
	waitTimeout   = 60 * time.Second
)

// newProxy returns a Managed kubernetes Proxy whose health checks go through
// it to the local target.
func newProxy(namespace, name string, cloudInit *crawlv1alpha1.CloudInit) *crawlv1alpha1.Proxy {
	return builders.Proxy(namespace, name).Managed("kubernetes").Attr("suite", "e2e").CloudInit(cloudInit).
		Probe(shared.target.URL+"/healthz", 2, 1).Obj()
}

func provisioned(p *crawlv1alpha1.Proxy) bool {
	return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) && p.Status.IP != ""
}

// waitProxy polls the Proxy until cond holds and returns it.
func waitProxy(t *testing.T, key client.ObjectKey, what string, cond func(*crawlv1alpha1.Proxy) bool) *crawlv1alpha1.Proxy {
	t.Helper()
	var last crawlv1alpha1.Proxy
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		var p crawlv1alpha1.Proxy
		if err := shared.client.Get(ctx, key, &p); err != nil {
			return false, nil
		}
		last = p
		return cond(&p), nil
	})
	if err != nil {
		t.Fatalf("waiting for Proxy %s to be %s: %v\nlast status: %+v", key, what, err, last.Status)
	}
	return &last
}

// waitGone polls until obj is NotFound.
func waitGone(t *testing.T, obj client.Object, what string) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		err := shared.client.Get(ctx, key, obj.DeepCopyObject().(client.Object))
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s %s to be gone: %v", what, key, err)
	}
}

// podOf returns the pod of p's current instance (deterministic name).
func podOf(t *testing.T, p *crawlv1alpha1.Proxy) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	key := client.ObjectKey{Namespace: p.Namespace, Name: provider.NameFromUID(p.UID)}
	if err := shared.client.Get(t.Context(), key, &pod); err != nil {
		t.Fatalf("pod of Proxy %s: %v", p.Name, err)
	}
	return &pod
}

// instanceOf returns what the node agent runs for p's pod, waiting until it
// runs the pod with the given UID.
func instanceOf(t *testing.T, pod *corev1.Pod) nodeagent.InstanceInfo {
	t.Helper()
	var inst nodeagent.InstanceInfo
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		var ok bool
		inst, ok = shared.agent.Instance(pod.Namespace, pod.Name)
		return ok && inst.UID == pod.UID && inst.PID > 0, nil
	})
	if err != nil {
		t.Fatalf("node agent runs no squid for pod %s (uid %s): %+v", pod.Name, pod.UID, inst)
	}
	return inst
}

func userDataOf(t *testing.T, inst nodeagent.InstanceInfo) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(inst.Dir, nodeagent.UserDataFile))
	if err != nil {
		t.Fatalf("user data of pod %s: %v", inst.Name, err)
	}
	return string(b)
}

// fetchThrough GETs target through the proxy at proxyURL with a fresh
// connection.
func fetchThrough(proxyURL, target string) (int, string, error) {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return 0, "", err
	}
	c := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true},
		Timeout:   10 * time.Second,
	}
	resp, err := c.Get(target)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// assertForwards proves that p's status.ip:3128 is a working proxy to the
// local target for the operator's credentials, with net/http and, if
// installed, curl -x, and only for them: without, it answers 407.
func assertForwards(t *testing.T, p *crawlv1alpha1.Proxy) {
	t.Helper()
	bare := "http://" + net.JoinHostPort(p.Status.IP, "3128")
	if got := p.ProxyURL(); got != bare {
		t.Errorf("ProxyURL() = %q, want %q", got, bare)
	}
	if code, _, err := fetchThrough(bare, shared.target.URL+"/page"); err != nil || code != http.StatusProxyAuthRequired {
		t.Fatalf("GET through %s without credentials = (%d, %v), want 407", bare, code, err)
	}
	keyring, err := framework.OperatorKeyring(t.Context(), shared.kube.CoreV1(), operatorNamespace, proxyauth.DefaultSecretName)
	if err != nil {
		t.Fatal(err)
	}
	proxyURL := framework.ProbeURL(keyring, p.Namespace, p.Name, bare)
	before := shared.targetHits.get()
	code, body, err := fetchThrough(proxyURL, shared.target.URL+"/page")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "e2e target") || !strings.Contains(body, "squid") {
		t.Fatalf("GET %s/page through %s = (%d, %q, %v), want 200 from the target via squid", shared.target.URL, proxyURL, code, body, err)
	}
	if shared.targetHits.get() <= before {
		t.Error("the target saw no request")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Logf("curl not installed; checked with net/http only")
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, curl, "-sS", "--fail", "--noproxy", "", "-x", proxyURL, shared.target.URL+"/curl").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "e2e target") {
		t.Errorf("curl -x %s = (%q, %v), want the target's page", proxyURL, out, err)
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

func TestProxyLifecycle(t *testing.T) {
	ctx := t.Context()
	p := newProxy(testNamespace, "lifecycle", &crawlv1alpha1.CloudInit{UserData: "#cloud-config\n# v1\n"})
	start := time.Now()
	if err := shared.client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(p)

	// Provisioned, with the pod's IP, on real squid.
	p = waitProxy(t, key, "Provisioned", provisioned)
	t.Logf("Proxy Provisioned %v after create, at %s", time.Since(start).Round(time.Millisecond), p.Status.IP)
	pod := podOf(t, p)
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP != p.Status.IP {
		t.Errorf("pod phase %s IP %s; Proxy IP %s", pod.Status.Phase, pod.Status.PodIP, p.Status.IP)
	}
	if pod.Labels[provider.OwnerUIDLabel] != string(p.UID) || pod.Spec.NodeName != nodeName {
		t.Errorf("pod labels %v node %q; want owner %s on %s", pod.Labels, pod.Spec.NodeName, p.UID, nodeName)
	}
	if !slices.Contains(p.Finalizers, crawlv1alpha1.FinalizerName) {
		t.Errorf("finalizers = %v, want %s", p.Finalizers, crawlv1alpha1.FinalizerName)
	}
	first := instanceOf(t, pod)
	// Negative control for TestMain's leak check: it does see live squids.
	if left := framework.SquidChildren(); !slices.ContainsFunc(left, func(s string) bool {
		return strings.HasPrefix(s, fmt.Sprintf("%d:", first.PID))
	}) {
		t.Errorf("framework.SquidChildren() = %v does not list the running squid %d", left, first.PID)
	}
	if got := userDataOf(t, first); got != "#cloud-config\n# v1\n" {
		t.Errorf("user data delivered = %q, want v1", got)
	}
	assertForwards(t, p)

	// The health engine probes through the squid: the Proxy turns Ready.
	p = waitProxy(t, key, "Ready", func(p *crawlv1alpha1.Proxy) bool { return p.Status.Phase == crawlv1alpha1.PhaseReady })
	if !p.IsHealthy() || p.Status.LatencyMillis == nil {
		t.Errorf("Ready Proxy: healthy %v latency %v", p.IsHealthy(), p.Status.LatencyMillis)
	}

	// Editing the spec replaces the instance: a new pod (same name, new UID)
	// and a new squid, with the new cloud-init data.
	p.Spec.CloudInit.UserData = "#cloud-config\n# v2\n"
	if err := shared.client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	p = waitProxy(t, key, "Provisioned on a new pod", func(p *crawlv1alpha1.Proxy) bool {
		if !provisioned(p) {
			return false
		}
		var cur corev1.Pod
		err := shared.client.Get(ctx, client.ObjectKeyFromObject(pod), &cur)
		return err == nil && cur.UID != pod.UID && cur.Status.PodIP == p.Status.IP
	})
	t.Logf("replacement Provisioned %v after the edit, at %s", time.Since(edited).Round(time.Millisecond), p.Status.IP)
	waitProcessGone(t, first.PID)
	newPod := podOf(t, p)
	second := instanceOf(t, newPod)
	if second.PID == first.PID {
		t.Errorf("squid pid %d unchanged by the replacement", second.PID)
	}
	if got := userDataOf(t, second); got != "#cloud-config\n# v2\n" {
		t.Errorf("user data after the edit = %q, want v2", got)
	}
	assertForwards(t, p)

	// Deleting the Proxy removes the pod and its squid, then the object.
	if err := shared.client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitGone(t, p, "Proxy")
	err := shared.client.Get(ctx, client.ObjectKeyFromObject(newPod), &corev1.Pod{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("pod after the Proxy is gone: %v, want NotFound (the finalizer waits for it)", err)
	}
	if nodeagent.ProcessAlive(second.PID) {
		t.Errorf("squid %d alive after the Proxy is gone", second.PID)
	}
	if _, ok := shared.agent.Instance(newPod.Namespace, newPod.Name); ok {
		t.Errorf("node agent still holds pod %s", newPod.Name)
	}
	if code, _, err := fetchThrough("http://"+net.JoinHostPort(second.Addr.String(), "3128"), shared.target.URL); err == nil {
		t.Errorf("the deleted Proxy's address still proxies (status %d)", code)
	}
}

func TestSecretRotationReplacesInstance(t *testing.T) {
	ctx := t.Context()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rotating-cloud-init", Namespace: testNamespace,
			Labels: map[string]string{crawlv1alpha1.CloudInitSecretLabel: "true"}},
		StringData: map[string]string{"userData": "#cloud-config\n# secret v1\n"},
	}
	if err := shared.client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	p := newProxy(testNamespace, "rotating", &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: secret.Name}})
	if err := shared.client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(p)
	p = waitProxy(t, key, "Provisioned", provisioned)
	pod := podOf(t, p)
	first := instanceOf(t, pod)
	if got := userDataOf(t, first); got != "#cloud-config\n# secret v1\n" {
		t.Errorf("user data from the Secret = %q, want secret v1", got)
	}
	// It reached the pod as its Secret volume: whoever may get pods does
	// not read it (#26 item 8).
	if raw, _ := json.Marshal(pod.Spec); strings.Contains(string(raw), "secret v1") {
		t.Errorf("the pod's spec carries the Secret's user data: %s", raw)
	}
	if vols := pod.Spec.Volumes; !slices.ContainsFunc(vols, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == secret.Name }) {
		t.Errorf("the pod mounts no volume of Secret %s: %+v", secret.Name, vols)
	}

	// Rotating the Secret (the Proxy is untouched) replaces the instance.
	secret.StringData = map[string]string{"userData": "#cloud-config\n# secret v2\n"}
	if err := shared.client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	p = waitProxy(t, key, "Provisioned on a new pod", func(p *crawlv1alpha1.Proxy) bool {
		if !provisioned(p) {
			return false
		}
		var cur corev1.Pod
		err := shared.client.Get(ctx, client.ObjectKeyFromObject(pod), &cur)
		return err == nil && cur.UID != pod.UID && cur.Status.PodIP == p.Status.IP
	})
	if p.Generation != 1 {
		t.Errorf("generation = %d: the rotation must not have needed a spec edit", p.Generation)
	}
	waitProcessGone(t, first.PID)
	second := instanceOf(t, podOf(t, p))
	if got := userDataOf(t, second); got != "#cloud-config\n# secret v2\n" {
		t.Errorf("user data after rotation = %q, want secret v2", got)
	}
	assertForwards(t, p)

	// Negative control: a Secret without the label is invisible to the
	// operator, so a Proxy referencing it gets no instance.
	hidden := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "unlabelled-cloud-init", Namespace: testNamespace},
		StringData: map[string]string{"userData": "#cloud-config\n"},
	}
	if err := shared.client.Create(ctx, hidden); err != nil {
		t.Fatal(err)
	}
	orphan := newProxy(testNamespace, "unlabelled-secret", &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: hidden.Name}})
	if err := shared.client.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	orphan = waitProxy(t, client.ObjectKeyFromObject(orphan), "CloudInitError", func(p *crawlv1alpha1.Proxy) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
		return c != nil && c.Reason == crawlv1alpha1.ReasonCloudInitError
	})
	if err := shared.client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: provider.NameFromUID(orphan.UID)}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod of a Proxy with an unlabelled Secret: %v, want NotFound", err)
	}

	for _, obj := range []client.Object{p, orphan} {
		if err := shared.client.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, p, "Proxy")
	waitGone(t, orphan, "Proxy")
	waitProcessGone(t, second.PID)
}

// TestNoSquidOutlivesItsPod is the invariant after the tests above: every
// squid the agent runs belongs to a pod that exists.
func TestNoSquidOutlivesItsPod(t *testing.T) {
	for _, inst := range shared.agent.Instances() {
		var pod corev1.Pod
		err := shared.client.Get(t.Context(), client.ObjectKey{Namespace: inst.Namespace, Name: inst.Name}, &pod)
		if err != nil || pod.UID != inst.UID {
			t.Errorf("squid %d runs for %s/%s (uid %s) but the pod is %v", inst.PID, inst.Namespace, inst.Name, inst.UID, describeErr(err, &pod))
		}
	}
}

func describeErr(err error, pod *corev1.Pod) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("uid %s", pod.UID)
}
