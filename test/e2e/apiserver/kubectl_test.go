package apiservere2e

import (
	"bufio"
	"context"
	"io/fs"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	artifacts "github.com/proxy-operator/proxy-operator/artifacts/apiserver"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

func example(t testing.TB, name string) string {
	t.Helper()
	data, err := fs.ReadFile(artifacts.Examples, "examples/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// exampleSelector is spec.selector of examples/proxylease.yaml. Tests give
// their proxies these attributes so that the example, which matches the dev
// sample fleet, leases them.
func exampleSelector(t testing.TB) map[string]string {
	t.Helper()
	sel := parseLease(t, example(t, "proxylease.yaml")).Spec.Selector
	if len(sel) == 0 {
		t.Fatal("examples/proxylease.yaml selects no attributes")
	}
	return sel
}

// selectorArg is sel as the examples' -selector flag: k=v[,k=v], sorted.
func selectorArg(sel map[string]string) string {
	pairs := make([]string, 0, len(sel))
	for k, v := range sel {
		pairs = append(pairs, k+"="+v)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

func parseLease(t testing.TB, out string) *leasingv1alpha1.ProxyLease {
	t.Helper()
	var pl leasingv1alpha1.ProxyLease
	if err := yaml.Unmarshal([]byte(out), &pl); err != nil {
		t.Fatalf("parsing %q: %v", out, err)
	}
	return &pl
}

func TestKubectlCreateGetWatchPatchDelete(t *testing.T) {
	ns := namespace(t, "kubectl-life")
	addProxy(t, ns, "px-match", exampleSelector(t))

	// -w from before the lease exists, printing the event types.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	cmd := exec.CommandContext(watchCtx, shared.kubectlBin, "--kubeconfig", shared.cp.KubeconfigPath, "--cache-dir", shared.cacheDir,
		"get", "proxyleases", "-n", ns, "-w", "--output-watch-events")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stopWatch(); _ = cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	out, errOut, err := kubectlIn(t, example(t, "proxylease.yaml"), "create", "-n", ns, "-f", "-", "-o", "yaml")
	if err != nil {
		t.Fatalf("kubectl create: %v\n%s", err, errOut)
	}
	pl := parseLease(t, out)
	if !strings.HasPrefix(pl.Name, "crawler-") || pl.Status.Proxy == nil || pl.Status.Proxy.Name != "px-match" ||
		pl.Status.Proxy.URL != "http://127.0.0.1:3128" || pl.Status.HolderIdentity != controlplane.AdminUser {
		t.Fatalf("created lease: %s", out)
	}

	table := mustKubectl(t, "get", "proxyleases", "-n", ns)
	header := strings.Fields(strings.SplitN(table, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME PROXY TARGET HOLDER EXPIRES AGE" {
		t.Errorf("header %q", header)
	}
	if !strings.Contains(table, pl.Name) || !strings.Contains(table, "px-match") || !strings.Contains(table, "example.com") {
		t.Errorf("table lacks the lease:\n%s", table)
	}
	if short := mustKubectl(t, "get", "pxl", "-n", ns, "-o", "name"); strings.TrimSpace(short) != "proxylease.leasing.crawl.example.com/"+pl.Name {
		t.Errorf("kubectl get pxl -o name = %q", short)
	}
	if cat := mustKubectl(t, "get", "crawl", "-n", ns, "-o", "name"); !strings.Contains(cat, pl.Name) {
		t.Errorf("kubectl get crawl lacks the lease: %q", cat)
	}
	for selector, want := range map[string]bool{
		"spec.target=example.com": true, "spec.target=other.org": false,
		"metadata.name=" + pl.Name: true, "status.proxy.name=px-match": true, "status.holderIdentity=someone-else": false,
	} {
		got := mustKubectl(t, "get", "pxl", "-n", ns, "--field-selector", selector, "-o", "name")
		if strings.Contains(got, pl.Name) != want {
			t.Errorf("--field-selector %s: %q", selector, got)
		}
	}
	if _, errOut, err := kubectl(t, "get", "pxl", "-n", ns, "--field-selector", "spec.selector=x"); err == nil || !strings.Contains(errOut, "not supported") {
		t.Errorf("an unsupported field selector: %v %s", err, errOut)
	}
	wide := mustKubectl(t, "get", "proxyleases", "-n", ns, "-o", "wide")
	if !strings.Contains(wide, "LEASE-ID") || !strings.Contains(wide, pl.Status.LeaseID) {
		t.Errorf("-o wide:\n%s", wide)
	}
	asYAML := parseLease(t, mustKubectl(t, "get", "proxylease", pl.Name, "-n", ns, "-o", "yaml"))
	if asYAML.Status.LeaseID != pl.Status.LeaseID || !maps.Equal(asYAML.Spec.Selector, exampleSelector(t)) {
		t.Errorf("-o yaml: %+v", asYAML)
	}

	// Renew with a merge patch of spec.ttlSeconds.
	patched := parseLease(t, mustKubectl(t, "patch", "proxylease", pl.Name, "-n", ns, "--type", "merge",
		"-p", `{"spec":{"ttlSeconds":1200}}`, "-o", "yaml"))
	if *patched.Spec.TTLSeconds != 1200 || !patched.Status.ExpireTime.After(pl.Status.ExpireTime.Add(10*time.Minute)) {
		t.Errorf("after patch: ttl %d expires %v (was %v)", *patched.Spec.TTLSeconds, patched.Status.ExpireTime, pl.Status.ExpireTime)
	}
	if l, ok := shared.store.Get(pl.Status.LeaseID); !ok || l.TTL != 20*time.Minute {
		t.Errorf("store lease after patch: %+v", l)
	}

	if out := mustKubectl(t, "delete", "proxylease", pl.Name, "-n", ns); !strings.Contains(out, "deleted") {
		t.Errorf("kubectl delete: %q", out)
	}
	if _, ok := shared.store.Get(pl.Status.LeaseID); ok {
		t.Error("kubectl delete did not release the lease")
	}
	if _, errOut, err := kubectl(t, "get", "proxylease", pl.Name, "-n", ns); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Errorf("get after delete: %v %s", err, errOut)
	}

	// The watch saw the lease appear, change (renewal) and go.
	var events []string
	deadline := time.After(20 * time.Second)
	for !(contains(events, "ADDED "+pl.Name) && contains(events, "DELETED "+pl.Name)) {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl -w ended; saw %q", events)
			}
			f := strings.Fields(line)
			if len(f) >= 2 {
				events = append(events, f[0]+" "+f[1])
			}
		case <-deadline:
			t.Fatalf("kubectl -w saw %q", events)
		}
	}
	if !contains(events, "MODIFIED "+pl.Name) {
		t.Errorf("kubectl -w did not see the renewal: %q", events)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestKubectlExplain(t *testing.T) {
	var out, errOut string
	var err error
	// kube-apiserver aggregates the OpenAPI of a new APIService shortly after
	// it turns Available.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		out, errOut, err = kubectl(t, "explain", "proxylease.spec")
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("kubectl explain: %v\n%s", err, errOut)
	}
	for _, want := range []string{"KIND:", "ProxyLease", "ttlSeconds", "selector", "waitSeconds", "renews the lease"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
	status := mustKubectl(t, "explain", "proxylease.status.proxy")
	if !strings.Contains(status, "url") || !strings.Contains(status, "latencyMillis") {
		t.Errorf("explain proxylease.status.proxy:\n%s", status)
	}
}

func TestKubectlValidationAndDryRun(t *testing.T) {
	ns := namespace(t, "kubectl-validation")
	addProxy(t, ns, "px", nil)
	bad := strings.Replace(example(t, "proxylease.yaml"), "ttlSeconds: 300", "ttlSeconds: 0", 1)
	_, errOut, err := kubectlIn(t, bad, "create", "-n", ns, "-f", "-")
	if err == nil || !strings.Contains(errOut, "Invalid") || !strings.Contains(errOut, "spec.ttlSeconds") {
		t.Errorf("ttlSeconds 0: %v %s", err, errOut)
	}
	out, errOut, err := kubectlIn(t, example(t, "proxylease.yaml"), "create", "-n", ns, "-f", "-", "--dry-run=server", "-o", "yaml")
	if err != nil {
		t.Fatalf("dry run: %v %s", err, errOut)
	}
	if pl := parseLease(t, out); pl.Status.Proxy != nil || !strings.HasPrefix(pl.Name, "crawler-") {
		t.Errorf("dry-run answer: %s", out)
	}
	if n := len(shared.store.List(ns)); n != 0 {
		t.Errorf("dry run acquired %d leases", n)
	}
}

func TestKubectlOverCapacityNamesWhy(t *testing.T) {
	ns := namespace(t, "kubectl-capacity")
	addProxy(t, ns, "only", exampleSelector(t))
	mustKubectlIn(t, example(t, "proxylease.yaml"), "create", "-n", ns, "-f", "-")
	_, errOut, err := kubectlIn(t, example(t, "proxylease.yaml"), "create", "-n", ns, "-f", "-")
	if err == nil {
		t.Fatal("second lease on the only proxy succeeded")
	}
	for _, want := range []string{"(Conflict)", "every matching Proxy is at capacity", "considered 1", "at capacity 1"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("error lacks %q: %s", want, errOut)
		}
	}
}

func mustKubectlIn(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := kubectlIn(t, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func TestKubectlServerSideApply(t *testing.T) {
	ns := namespace(t, "kubectl-ssa")
	addProxy(t, ns, "px", nil)
	manifest := example(t, "proxylease-named.yaml")
	mustKubectlIn(t, manifest, "apply", "--server-side", "-n", ns, "-f", "-")
	first, err := shared.leasing.LeasingV1alpha1().ProxyLeases(ns).Get(context.Background(), "nightly-crawl", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status.Proxy == nil || len(first.ManagedFields) == 0 {
		t.Errorf("applied lease: proxy %v, managedFields %v", first.Status.Proxy, first.ManagedFields)
	}
	time.Sleep(1100 * time.Millisecond) // expireTime has second precision
	mustKubectlIn(t, strings.Replace(manifest, "ttlSeconds: 600", "ttlSeconds: 900", 1), "apply", "--server-side", "-n", ns, "-f", "-")
	second, err := shared.leasing.LeasingV1alpha1().ProxyLeases(ns).Get(context.Background(), "nightly-crawl", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if second.Status.LeaseID != first.Status.LeaseID || *second.Spec.TTLSeconds != 900 ||
		!second.Status.ExpireTime.After(first.Status.ExpireTime.Add(5*time.Minute)) {
		t.Errorf("re-apply: lease %s→%s ttl %d expires %v→%v", first.Status.LeaseID, second.Status.LeaseID,
			*second.Spec.TTLSeconds, first.Status.ExpireTime, second.Status.ExpireTime)
	}
}
