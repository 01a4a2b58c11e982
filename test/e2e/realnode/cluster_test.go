package realnode

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

// clusterEnv names the environment variable holding make cluster's state
// directory; make test-realnode sets it.
const clusterEnv = "PROXY_OPERATOR_CLUSTER"

const (
	operatorNS = "proxy-operator-system"
	crawlNS    = "crawlers"
	originNS   = "origin"
	apiService = "v1alpha1.leasing.crawl.example.com"
	// sitePort is where the site (a host-network pod on the node's public
	// stand-in address) listens: a web port, the only kind a proxy takes a
	// lease's requests to by default.
	sitePort = 80
)

// cluster is make cluster's cluster, as its contract files describe it.
type cluster struct {
	root, dir, kubeconfig, kubectlBin string
	// images: operator, squid, toolbox references, loaded on the node.
	images map[string]string
	// site is the node's stand-in for a public site's address.
	site    string
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	leasing versioned.Interface
	// leaseURL is the first lease's proxy URL, for the steps after it.
	leaseURL string
}

// connect reads make cluster's contract files, or skips outside make
// test-realnode.
func connect(t *testing.T) *cluster {
	t.Helper()
	dir := os.Getenv(clusterEnv)
	if dir == "" {
		t.Skipf("%s is not set: make test-realnode brings up make cluster and runs this", clusterEnv)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{root: root, dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig"), kubectlBin: filepath.Join(root, "bin", "kubectl"), images: map[string]string{}}
	if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
		t.Fatalf("make cluster is not ready (%s): %v", dir, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if name, ref, ok := strings.Cut(sc.Text(), "="); ok {
			c.images[name] = ref
		}
	}
	for _, want := range []string{"operator", "squid", "toolbox"} {
		if c.images[want] == "" {
			t.Fatalf("%s/images names no %s image: %q", dir, want, data)
		}
	}
	site, err := os.ReadFile(filepath.Join(dir, "site-address"))
	if err != nil {
		t.Fatal(err)
	}
	c.site = strings.TrimSpace(string(site))
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.leasing, err = versioned.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// kubectl runs bin/kubectl on the cluster from the repository root, as the
// README's commands run.
func (c *cluster) kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	return c.run(ctx, stdin, c.kubectlBin, args...)
}

func (c *cluster) run(ctx context.Context, stdin []byte, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// must runs kubectl and fails the test on an error.
func (c *cluster) must(t *testing.T, timeout time.Duration, stdin []byte, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := c.kubectl(ctx, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitInstalled waits for both replicas Ready and the APIService
// Available.
func (c *cluster) waitInstalled(t *testing.T) {
	t.Helper()
	rctx, rcancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer rcancel()
	if _, err := c.kubectl(rctx, nil, "-n", operatorNS, "rollout", "status", "deploy/proxy-operator", "--timeout=3m"); err != nil {
		c.dumpOperator(t)
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var why string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := c.kube.AppsV1().Deployments(operatorNS).Get(ctx, "proxy-operator", metav1.GetOptions{})
		if err != nil {
			why = err.Error()
			return false, nil
		}
		if d.Status.ReadyReplicas != 2 || d.Status.Replicas != 2 {
			why = fmt.Sprintf("%d of %d replicas Ready", d.Status.ReadyReplicas, d.Status.Replicas)
			return false, nil
		}
		var ok bool
		ok, why = framework.APIServiceAvailable(ctx, c.dyn, apiService)
		return ok, nil
	})
	if err != nil {
		c.dumpOperator(t)
		t.Fatalf("not installed: %s", why)
	}
}

// dumpOperator logs the operator pods' state and log tails.
func (c *cluster) dumpOperator(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := c.kubectl(ctx, nil, "-n", operatorNS, "get", "pods,events", "-o", "wide")
	t.Logf("operator namespace:\n%s", out)
	out, _ = c.kubectl(ctx, nil, "-n", operatorNS, "logs", "-l", "app.kubernetes.io/name=proxy-operator", "--tail=30", "--prefix", "--all-containers")
	t.Logf("operator logs:\n%s", out)
	out, _ = c.kubectl(ctx, nil, "-n", operatorNS, "logs", "-l", "app.kubernetes.io/name=proxy-operator", "--tail=10", "--prefix", "--previous")
	t.Logf("operator logs before the last restart:\n%s", out)
}

// podResult is how a toolbox pod ended.
type podResult struct {
	logs      string
	exitCode  int32
	succeeded bool
}

// runToolbox runs script in a pod of the toolbox image, as Pod Security
// "restricted" allows, with the given ServiceAccount and environment, and
// waits for it to end.
func (c *cluster) runToolbox(t *testing.T, ns, name, serviceAccount string, env map[string]string, script string) podResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var envVars []corev1.EnvVar
	for k, v := range env {
		envVars = append(envVars, corev1.EnvVar{Name: k, Value: v})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ServiceAccountName:            serviceAccount,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "toolbox", Image: c.images["toolbox"], ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script}, Env: envVars,
				SecurityContext: restrictedContainer(),
			}},
		},
	}
	if _, err := c.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	defer func() {
		_ = c.kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	var res podResult
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := c.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Terminated != nil {
				res.exitCode = s.State.Terminated.ExitCode
				res.succeeded = p.Status.Phase == corev1.PodSucceeded || res.exitCode == 0
				return true, nil
			}
		}
		return false, nil
	})
	logs, lerr := c.kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	res.logs = string(logs)
	if err != nil {
		ev, _ := c.kubectl(context.Background(), nil, "-n", ns, "get", "events", "--field-selector", "involvedObject.name="+name)
		t.Fatalf("pod %s/%s did not end: %v\nlogs (%v): %s\nevents:\n%s", ns, name, err, lerr, logs, ev)
	}
	return res
}

func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}
