package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.example.com
spec:
  group: test.example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
---
`

// syncBuffer collects the children's output while they run.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestControlPlane(t *testing.T) {
	out := &syncBuffer{}
	start := time.Now()
	cp := StartForTest(t, Options{Out: out})
	t.Logf("control plane ready in %v at %s", time.Since(start).Round(time.Millisecond), cp.Host)
	ctx := context.Background()

	t.Run("kubeconfig lists namespaces", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath)
		if err != nil {
			t.Fatalf("loading kubeconfig: %v", err)
		}
		if cfg.Host != cp.Host {
			t.Errorf("kubeconfig host = %q, want %q", cfg.Host, cp.Host)
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		nsList, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing namespaces: %v", err)
		}
		got := map[string]bool{}
		for _, ns := range nsList.Items {
			got[ns.Name] = true
		}
		for _, want := range []string{"default", "kube-system"} {
			if !got[want] {
				t.Errorf("namespace %q missing from %v", want, got)
			}
		}
	})

	t.Run("RBAC denies users without bindings", func(t *testing.T) {
		admin := kubernetes.NewForConfigOrDie(cp.RESTConfig())
		// Negative control: the admin may do what the others may not.
		if _, err := admin.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("admin listing configmaps: %v", err)
		}

		impCfg := cp.RESTConfig()
		impCfg.Impersonate = rest.ImpersonationConfig{UserName: "mallory", Groups: []string{"system:authenticated"}}
		_, err := kubernetes.NewForConfigOrDie(impCfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("impersonated user listing namespaces: err = %v, want Forbidden", err)
		}

		// A certificate user: forbidden until a RoleBinding grants exactly
		// one namespace.
		aliceCfg, err := cp.ClientConfigFor("alice", "crawlers")
		if err != nil {
			t.Fatal(err)
		}
		alice := kubernetes.NewForConfigOrDie(aliceCfg)
		if _, err := alice.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("alice before binding: err = %v, want Forbidden", err)
		}
		// Our own Role: the aggregated ClusterRoles (view, edit) stay empty
		// without kube-controller-manager.
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader", Namespace: "default"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}},
		}
		if _, err := admin.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating role: %v", err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "crawlers-read", Namespace: "default"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmap-reader"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "crawlers"}},
		}
		if _, err := admin.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating rolebinding: %v", err)
		}
		if err := pollUntil(ctx, 10*time.Second, func() error {
			_, err := alice.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			return err
		}); err != nil {
			t.Errorf("alice after binding in default: %v", err)
		}
		if _, err := alice.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("alice in kube-system: err = %v, want Forbidden", err)
		}
	})

	t.Run("extension-apiserver-authentication carries requestheader settings", func(t *testing.T) {
		admin := kubernetes.NewForConfigOrDie(cp.RESTConfig())
		cm, err := admin.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting configmap: %v", err)
		}
		jsonList := func(key string) []string {
			var v []string
			if err := json.Unmarshal([]byte(cm.Data[key]), &v); err != nil {
				t.Errorf("%s = %q: %v", key, cm.Data[key], err)
			}
			return v
		}
		got := map[string][]string{
			"requestheader-allowed-names":        jsonList("requestheader-allowed-names"),
			"requestheader-username-headers":     jsonList("requestheader-username-headers"),
			"requestheader-group-headers":        jsonList("requestheader-group-headers"),
			"requestheader-extra-headers-prefix": jsonList("requestheader-extra-headers-prefix"),
		}
		want := map[string][]string{
			"requestheader-allowed-names":        {FrontProxyClientName},
			"requestheader-username-headers":     {"X-Remote-User"},
			"requestheader-group-headers":        {"X-Remote-Group"},
			"requestheader-extra-headers-prefix": {"X-Remote-Extra-"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("requestheader settings (-want +got):\n%s", diff)
		}
		for key, path := range map[string]string{
			"requestheader-client-ca-file": cp.RequestHeaderCACertPath,
			"client-ca-file":               cp.ClientCACertPath,
		} {
			pem, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(cm.Data[key]) != strings.TrimSpace(string(pem)) {
				t.Errorf("%s does not hold %s", key, filepath.Base(path))
			}
		}
	})

	t.Run("project CRDs are installed by default", func(t *testing.T) {
		client := apiextensionsclient.NewForConfigOrDie(cp.RESTConfig())
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "proxies.crawl.example.com", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting Proxy CRD: %v", err)
		}
		if !crdCondition(crd, apiextensionsv1.Established) {
			t.Errorf("Proxy CRD not Established: %+v", crd.Status.Conditions)
		}
		// Negative control: nothing else was installed.
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "widgets.test.example.com", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("widgets CRD before InstallCRDs: err = %v, want NotFound", err)
		}
	})

	t.Run("InstallCRDs establishes and serves CRDs", func(t *testing.T) {
		fsys := fstest.MapFS{"widgets.yaml": {Data: []byte(widgetCRD)}, "README.md": {Data: []byte("not yaml")}}
		if err := InstallCRDs(ctx, cp.RESTConfig(), fsys); err != nil {
			t.Fatalf("InstallCRDs: %v", err)
		}
		refs, err := ApplyYAML(ctx, cp.RESTConfig(), []byte("apiVersion: test.example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n"))
		if err != nil {
			t.Fatalf("applying widget: %v", err)
		}
		if diff := cmp.Diff([]string{"widget/default/w1"}, refs); diff != "" {
			t.Errorf("applied (-want +got):\n%s", diff)
		}
		dyn := dynamic.NewForConfigOrDie(cp.RESTConfig())
		gvr := schema.GroupVersionResource{Group: "test.example.com", Version: "v1", Resource: "widgets"}
		w, err := dyn.Resource(gvr).Namespace("default").Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting widget: %v", err)
		}
		if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != 3 {
			t.Errorf("spec.size = %d, want 3", size)
		}
		// The CRD's schema is enforced: size has minimum 1.
		_, err = ApplyYAML(ctx, cp.RESTConfig(), []byte("apiVersion: test.example.com/v1\nkind: Widget\nmetadata: {name: w2}\nspec: {size: 0}\n"))
		if !apierrors.IsInvalid(err) {
			t.Errorf("applying invalid widget: err = %v, want Invalid", err)
		}
	})

	t.Run("InstallCRDs rejects other kinds", func(t *testing.T) {
		fsys := fstest.MapFS{"cm.yaml": {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")}}
		err := InstallCRDs(ctx, cp.RESTConfig(), fsys)
		if err == nil || !strings.Contains(err.Error(), `unexpected kind "ConfigMap"`) {
			t.Errorf("err = %v, want unexpected kind", err)
		}
	})

	t.Run("Out receives prefixed process output", func(t *testing.T) {
		if !strings.Contains(out.String(), "[kube-apiserver] ") {
			t.Errorf("no [kube-apiserver] lines in Out (%d bytes)", len(out.String()))
		}
		data, err := os.ReadFile(cp.APIServerLogPath)
		if err != nil || len(data) == 0 {
			t.Errorf("apiserver log file empty or missing: %v", err)
		}
	})

	t.Run("Stop leaves no process and no directory", func(t *testing.T) {
		pids := cp.pids()
		if len(pids) != 2 {
			t.Fatalf("pids = %v, want etcd and kube-apiserver", pids)
		}
		// Negative control: before Stop everything exists.
		for name, pid := range pids {
			if !processAlive(pid) {
				t.Fatalf("%s (pid %d) not running before Stop", name, pid)
			}
		}
		if _, err := os.Stat(cp.Dir); err != nil {
			t.Fatalf("dir before Stop: %v", err)
		}
		select {
		case <-cp.Done():
			t.Fatal("Done closed while running")
		default:
		}
		if err := cp.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		select {
		case <-cp.Done():
		default:
			t.Error("Done not closed after Stop")
		}
		for name, pid := range pids {
			if processAlive(pid) {
				t.Errorf("%s (pid %d) still running after Stop", name, pid)
			}
		}
		if _, err := os.Stat(cp.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dir %s after Stop: err = %v, want not exist", cp.Dir, err)
		}
		if leftover := processesMentioning(t, cp.Dir); len(leftover) > 0 {
			t.Errorf("processes still referring to %s: %v", cp.Dir, leftover)
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("second Stop: %v", err)
		}
	})
}

func TestStartFailureCleansUp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cp")
	_, err := Start(context.Background(), Options{
		Dir:            dir,
		APIServerFlags: map[string]string{"no-such-flag": "1"},
	})
	if err == nil {
		t.Fatal("Start succeeded with an unknown kube-apiserver flag")
	}
	var se *startError
	if !errors.As(err, &se) || se.process != "kube-apiserver" {
		t.Errorf("err = %v, want a kube-apiserver start error", err)
	}
	if !strings.Contains(err.Error(), "kube-apiserver failed to start") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("error does not name the process and show its log:\n%v", err)
	}
	if _, statErr := os.Stat(dir); !errors.Is(statErr, os.ErrNotExist) {
		t.Errorf("dir after failed Start: err = %v, want not exist", statErr)
	}
	if leftover := processesMentioning(t, dir); len(leftover) > 0 {
		t.Errorf("processes left after failed Start: %v", leftover)
	}
}

func TestStartWithoutBinaries(t *testing.T) {
	_, err := Start(context.Background(), Options{BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Errorf("err = %v, want a hint to run make tools", err)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "controlplane", "doc.go")); err != nil {
		t.Errorf("RepoRoot() = %s does not contain this package: %v", root, err)
	}
	if isModule([]byte("module github.com/other/mod\n")) {
		t.Error("isModule accepted another module")
	}
}

// processesMentioning lists /proc entries whose command line contains s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("reading /proc: %v", err)
	}
	var found []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), s) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

func pollUntil(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// helperEnv selects the behaviour of TestHelperControlPlane when the test
// binary re-executes itself.
const helperEnv = "CONTROLPLANE_TEST_HELPER"

// TestHelperControlPlane is not a test on its own: the tests below run it in
// a child test binary that starts a control plane, reports its pids and then
// fails (mode "fail") or waits to be killed (mode "kill").
func TestHelperControlPlane(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper for TestNoLeftovers*")
	}
	cp := StartForTest(t, Options{SkipCRDs: true})
	pids := cp.pids()
	fmt.Printf("CPINFO %d %d %s\n", pids["etcd"], pids["kube-apiserver"], cp.Dir)
	if mode == "fail" {
		t.Fatal("deliberate failure")
	}
	time.Sleep(time.Minute) // killed by the parent long before
}

type helperInfo struct {
	pids []int
	dir  string
}

// runHelper starts the helper in mode and returns once it reported its
// control plane.
func runHelper(t *testing.T, mode string) (*exec.Cmd, helperInfo, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperControlPlane$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	scanner := bufio.NewScanner(stdout)
	var rest syncBuffer
	for scanner.Scan() {
		line := scanner.Text()
		fmt.Fprintln(&rest, line)
		var info helperInfo
		var etcdPid, apiPid int
		if n, _ := fmt.Sscanf(line, "CPINFO %d %d %s", &etcdPid, &apiPid, &info.dir); n == 3 {
			info.pids = []int{etcdPid, apiPid}
			go func() { // keep draining so the helper never blocks on stdout
				for scanner.Scan() {
					fmt.Fprintln(&rest, scanner.Text())
				}
			}()
			return cmd, info, &rest
		}
	}
	_ = cmd.Wait()
	t.Fatalf("helper never reported its control plane; output:\n%s\nstderr:\n%s", rest.String(), stderr.String())
	return nil, helperInfo{}, nil
}

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for processAlive(pid) {
			if time.Now().After(deadline) {
				t.Errorf("pid %d still running", pid)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestNoLeftoversWhenTestFails(t *testing.T) {
	cmd, info, out := runHelper(t, "fail")
	err := cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || !strings.Contains(out.String(), "deliberate failure") {
		t.Fatalf("helper: err = %v, want a failed test; output:\n%s", err, out.String())
	}
	// The failed test logs the process logs before they are removed.
	if !strings.Contains(out.String(), "last lines of kube-apiserver log") {
		t.Errorf("failed test did not log the kube-apiserver log tail:\n%s", out.String())
	}
	waitGone(t, info.pids)
	if _, err := os.Stat(info.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s after failed test: err = %v, want not exist", info.dir, err)
	}
}

func TestNoLeftoversWhenTestBinaryIsKilled(t *testing.T) {
	cmd, info, _ := runHelper(t, "kill")
	for _, pid := range info.pids {
		if !processAlive(pid) { // negative control for waitGone
			t.Fatalf("pid %d not running while the helper lives", pid)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// Pdeathsig: the kernel kills the children of the dead test binary.
	waitGone(t, info.pids)
	// Nobody ran Stop, so the directory is still there until the next Start
	// (or this sweep) notices its owner is gone.
	if _, err := os.Stat(info.dir); err != nil {
		t.Fatalf("dir %s of killed helper: %v", info.dir, err)
	}
	removeStaleTempDirs()
	if _, err := os.Stat(info.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale dir %s after sweep: err = %v, want not exist", info.dir, err)
	}
}
