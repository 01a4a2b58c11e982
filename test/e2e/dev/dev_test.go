package deve2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/proxy-operator/proxy-operator/artifacts/observability"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/devenv"
)

// The squids of this package: disjoint from the other test packages' pools.
var (
	poolFirst = netip.MustParseAddr("127.0.9.2")
	poolLast  = netip.MustParseAddr("127.0.9.60")
)

// harness is the running environment and the tools the steps use.
type harness struct {
	env      *devenv.Env
	kubectl  string
	cacheDir string
}

func TestDevEnvironment(t *testing.T) {
	binDir, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is required: the test uses the proxies and the API as README shows, with curl: %v", err)
	}
	dir := t.TempDir()
	logger, err := devenv.FileLogger(filepath.Join(dir, devenv.LogsDir, "dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	// As hack/dev does: one logger for the operator, controller-runtime and klog.
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	env, err := devenv.Start(ctx, devenv.Options{
		Dir:       dir,
		Ports:     devenv.Ports{}, // all free: the test may run beside `make dev`
		Progress:  testWriter{t},
		NodeName:  "proxy-operator-dev-e2e",
		PoolFirst: poolFirst,
		PoolLast:  poolLast,
		// The fake Compute Engine's squids, disjoint from the agent's.
		GCEPoolFirst: netip.MustParseAddr("127.0.9.100"),
		GCEPoolLast:  netip.MustParseAddr("127.0.9.140"),
		// As docs/gc.md shows, to watch the orphan collector work.
		OperatorArgs: []string{"--gc-interval=2s", "--gc-min-age=1m", "--gateway-session-idle=" + gatewaySessionIdle.String()},
	})
	if err != nil {
		dumpLogs(t, dir)
		t.Fatalf("starting the dev environment: %v", err)
	}
	t.Logf("dev environment up in %s", time.Since(began).Round(100*time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, dir)
		}
		if !stopped {
			_ = env.Stop(context.Background())
		}
	})
	h := &harness{env: env, kubectl: filepath.Join(binDir, "kubectl"), cacheDir: filepath.Join(dir, "kubectl-cache")}

	t.Run("contract files", h.contractFiles)
	t.Run("kubectl get proxies shows the fleet Ready", h.proxiesReady)
	t.Run("HTTP API is HTTPS with the operator's own certificate", h.operatorTLS)
	t.Run("HTTP API without the token is 401", h.unauthorized)
	t.Run("HTTP list, lease, curl -x, report, release", h.httpLeaseCycle)
	t.Run("proxies serve a live lease's credentials only", h.proxyCredentials)
	t.Run("waiting HTTP lease granted on release", h.waitingLease)
	t.Run("ProxyLease through kube-apiserver", h.proxyLease)
	t.Run("a SitePolicy bounds a site's leases through both doors and adapts", h.sitePolicy)
	t.Run("a ladder climbs to premium when the standard tier is banned, within its budget", h.ladder)
	t.Run("a SitePolicy spaces one proxy's grants for its site", h.proxyInterval)
	t.Run("README's first lease, as written", h.readmeFirstLease)
	t.Run("the gateway serves curl, Python and Scrapy with a URL alone", h.gateway)
	t.Run("orphan collector deletes a planted VM and spares the fleet", h.orphanCollected)
	t.Run("dashboard and alerts query only metrics the operator exports", h.observabilityMetrics)
	t.Run("the sample pool grows from zero for a waiting lease and shrinks back", h.poolFromZero)
	t.Run("a pool of Squid pods follows kubectl scale, rolls, drains and adopts", h.kubectlScale)
	t.Run("the operator restarts as its own process, with its leases", h.operatorRestarts)

	t.Run("teardown leaves no processes", func(t *testing.T) {
		dirs := env.ProcessDirs()
		// Negative control: the checker sees the running children (etcd,
		// kube-apiserver, one squid per sample Proxy).
		before := devenv.ProcessesUsing(dirs...)
		if want := 2 + len(env.Fleet); len(before) < want {
			t.Errorf("before Stop, ProcessesUsing found %v, want at least %d processes: the leak check would miss leftovers", before, want)
		}
		stopBegan := time.Now()
		stopped = true
		if err := env.Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		t.Logf("stopped in %s", time.Since(stopBegan).Round(100*time.Millisecond))
		if left := devenv.ProcessesUsing(dirs...); len(left) > 0 {
			t.Errorf("processes left behind: %v", left)
		}
		for _, f := range []string{devenv.ReadyFile, devenv.DiscoveryTokenFile, devenv.DiscoveryURLFile, devenv.GatewayURLFile, devenv.CAFile, devenv.KubeconfigFile} {
			if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
				t.Errorf("%s still present after Stop (stat: %v)", f, err)
			}
		}
	})
}

func (h *harness) contractFiles(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(h.env.Dir, name))
		if err != nil {
			t.Fatalf("contract file: %v", err)
		}
		return strings.TrimSpace(string(b))
	}
	got := map[string]string{
		devenv.ReadyFile:          read(devenv.ReadyFile),
		devenv.DiscoveryURLFile:   read(devenv.DiscoveryURLFile),
		devenv.DiscoveryTokenFile: read(devenv.DiscoveryTokenFile),
	}
	want := map[string]string{
		devenv.ReadyFile:          strconv.Itoa(os.Getpid()),
		devenv.DiscoveryURLFile:   h.env.DiscoveryURL,
		devenv.DiscoveryTokenFile: h.env.DiscoveryToken,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("contract files (-want +got):\n%s", d)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(h.env.DiscoveryToken) {
		t.Errorf("discovery token %q is not 32 random bytes in hex", h.env.DiscoveryToken)
	}
	if fi, err := os.Stat(filepath.Join(h.env.Dir, devenv.DiscoveryTokenFile)); err == nil && fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("discovery-token has mode %v, want no access for group and others", fi.Mode().Perm())
	}
}

// operatorTLS: the discovery API serves the certificate the operator issued
// into its Secret, verified by the CA it published in its ConfigMap, in the
// APIService's caBundle and in .dev/ca.crt; without that CA, or over plain
// HTTP, nothing is served.
func (h *harness) operatorTLS(t *testing.T) {
	if !strings.HasPrefix(h.env.DiscoveryURL, "https://") {
		t.Fatalf("discovery URL %s is not https", h.env.DiscoveryURL)
	}
	caFile, err := os.ReadFile(h.env.CAPath)
	if err != nil {
		t.Fatal(err)
	}
	cm := h.mustKubectl(t, "-n", "proxy-operator-system", "get", "configmap", "proxy-operator-ca", "-o", "jsonpath={.data.ca\\.crt}")
	bundle := h.mustKubectl(t, "get", "apiservice", devenv.APIServiceName, "-o", "jsonpath={.spec.caBundle}")
	caBundle, err := base64.StdEncoding.DecodeString(bundle)
	if err != nil {
		t.Fatalf("APIService caBundle: %v", err)
	}
	if string(caFile) != cm || string(caBundle) != cm {
		t.Errorf("CA differs: %s (%d bytes), ConfigMap (%d bytes), APIService caBundle (%d bytes)", devenv.CAFile, len(caFile), len(cm), len(caBundle))
	}
	if typ := h.mustKubectl(t, "-n", "proxy-operator-system", "get", "secret", devenv.ServingCertSecret, "-o", "jsonpath={.type}"); typ != "kubernetes.io/tls" {
		t.Errorf("serving certificate Secret type %q", typ)
	}
	if code, body := h.curl(t, "", h.env.DiscoveryURL+"/healthz"); code != 200 {
		t.Errorf("healthz with the CA: %d %s", code, body)
	}
	// Negative controls: curl's own roots do not know the operator's CA, and
	// plain HTTP on the TLS port is refused.
	out, err := exec.Command("curl", "-sS", "--max-time", "10", h.env.DiscoveryURL+"/healthz").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 60 {
		t.Errorf("curl without --cacert: %v %s, want exit 60 (certificate not verified)", err, out)
	}
	plain := "http://" + strings.TrimPrefix(h.env.DiscoveryURL, "https://") + "/healthz"
	if code, body := h.curl(t, "", plain); code != 400 {
		t.Errorf("plain HTTP to the TLS port: %d %s, want 400", code, body)
	}
}

func (h *harness) proxiesReady(t *testing.T) {
	out := h.mustKubectl(t, "get", "proxies", "-A", "--no-headers",
		"-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase,HEALTHY:.status.conditions[?(@.type=='Healthy')].status")
	got := strings.Fields(out)
	var want []string
	for _, p := range h.env.Fleet {
		want = append(want, p.Namespace, p.Name, "Ready", "True")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("kubectl get proxies (-want +got):\n%s\n%s", d, out)
	}
	// The printer columns users see.
	table := h.mustKubectl(t, "get", "proxies")
	for _, p := range h.env.Fleet {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(p.Name) + `\s+Ready\s+127\.`).MatchString(table) {
			t.Errorf("kubectl get proxies has no Ready row with a loopback IP for %s:\n%s", p.Name, table)
		}
	}
}

func (h *harness) unauthorized(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token string
		args  []string
		want  int
	}{
		{"list without token", "", []string{h.env.DiscoveryURL + "/v1/proxies"}, 401},
		{"lease without token", "", []string{"-d", `{"target":"origin"}`, h.env.DiscoveryURL + "/v1/leases"}, 401},
		{"list with a wrong token", "not-the-token", []string{h.env.DiscoveryURL + "/v1/proxies"}, 401},
		{"healthz needs no token", "", []string{h.env.DiscoveryURL + "/healthz"}, 200},
		// Negative control: the same list with the token is allowed.
		{"list with the token", h.env.DiscoveryToken, []string{h.env.DiscoveryURL + "/v1/proxies"}, 200},
	} {
		code, body := h.curl(t, tc.token, tc.args...)
		if code != tc.want {
			t.Errorf("%s: HTTP %d, want %d (%s)", tc.name, code, tc.want, body)
		}
		if tc.want == 401 && !strings.Contains(body, `"error":"unauthorized"`) {
			t.Errorf("%s: body %s, want the JSON error unauthorized", tc.name, body)
		}
	}
}

type wireProxy struct {
	Name       string            `json:"name"`
	Namespace  string            `json:"namespace"`
	URL        string            `json:"url"`
	Attributes map[string]string `json:"attributes"`
	Healthy    bool              `json:"healthy"`
}

type wireLease struct {
	LeaseID string    `json:"leaseID"`
	Proxy   wireProxy `json:"proxy"`
}

func (h *harness) httpLeaseCycle(t *testing.T) {
	url, token := h.env.DiscoveryURL, h.env.DiscoveryToken
	code, body := h.curl(t, token, url+"/v1/proxies?healthy=true")
	var list struct {
		Proxies []wireProxy `json:"proxies"`
		Count   int         `json:"count"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("list: HTTP %d %s", code, body)
	}
	if list.Count != len(h.env.Fleet) {
		t.Errorf("list: %d healthy proxies, want the %d of the fleet: %s", list.Count, len(h.env.Fleet), body)
	}

	code, body = h.curl(t, token, "-d", `{"selector":{"tier":"standard"},"target":"origin","ttlSeconds":60}`, url+"/v1/leases")
	var l wireLease
	if code != 201 || json.Unmarshal([]byte(body), &l) != nil || l.LeaseID == "" {
		t.Fatalf("lease: HTTP %d %s", code, body)
	}
	if l.Proxy.Attributes["tier"] != "standard" {
		t.Errorf("leased %s with attributes %v, want tier=standard", l.Proxy.Name, l.Proxy.Attributes)
	}
	released := false
	defer func() {
		if !released {
			h.curl(t, token, "-X", "DELETE", url+"/v1/leases/"+l.LeaseID)
		}
	}()

	// Use the proxy: the request reaches the origin through squid.
	hits := h.env.OriginHits()
	out, err := exec.Command("curl", "-sS", "--max-time", "10", "-x", l.Proxy.URL, h.env.OriginURL+"/dev-e2e").CombinedOutput()
	if err != nil {
		t.Fatalf("curl -x %s: %v\n%s", l.Proxy.URL, err, out)
	}
	if !strings.Contains(string(out), "GET /dev-e2e") || !strings.Contains(string(out), "squid") {
		t.Errorf("curl -x %s answered %q, want the origin's answer with squid's Via header", l.Proxy.URL, out)
	}
	if h.env.OriginHits() <= hits {
		t.Error("the origin saw no request from curl -x")
	}

	// One store: the HTTP lease is a ProxyLease too.
	pl := h.mustKubectl(t, "get", "proxyleases", "-A", "--no-headers")
	if !strings.Contains(pl, l.LeaseID) || !strings.Contains(pl, l.Proxy.Name) {
		t.Errorf("kubectl get proxyleases does not show HTTP lease %s on %s:\n%s", l.LeaseID, l.Proxy.Name, pl)
	}
	if m := h.metric(t, h.env.MetricsURL, "proxy_operator_leases_active"); m != "1" {
		t.Errorf("proxy_operator_leases_active = %q while one lease is live, want 1", m)
	}

	if code, body := h.curl(t, token, "-d", `{"result":"ok","target":"origin"}`, url+"/v1/leases/"+l.LeaseID+"/report"); code != 204 {
		t.Errorf("report ok: HTTP %d %s, want 204", code, body)
	}
	if code, body := h.curl(t, token, "-d", `{"result":"meh"}`, url+"/v1/leases/"+l.LeaseID+"/report"); code != 400 || !strings.Contains(body, "invalid_result") {
		t.Errorf("report meh: HTTP %d %s, want 400 invalid_result", code, body)
	}
	if code, body := h.curl(t, token, "-X", "DELETE", url+"/v1/leases/"+l.LeaseID); code != 204 {
		t.Errorf("release: HTTP %d %s, want 204", code, body)
	}
	released = true
	if pl := h.mustKubectl(t, "get", "proxyleases", "-A", "-o", "name"); strings.Contains(pl, l.LeaseID) {
		t.Errorf("released lease still listed:\n%s", pl)
	}
	if m := h.metric(t, h.env.MetricsURL, "proxy_operator_leases_active"); m != "0" {
		t.Errorf("proxy_operator_leases_active = %q after the release, want 0", m)
	}
}

// A lease request that waits is granted as soon as the holder releases.
func (h *harness) waitingLease(t *testing.T) {
	url, token := h.env.DiscoveryURL, h.env.DiscoveryToken
	req := `{"selector":{"tier":"premium"},"target":"origin","ttlSeconds":60}`
	code, body := h.curl(t, token, "-d", req, url+"/v1/leases")
	var first wireLease
	if code != 201 || json.Unmarshal([]byte(body), &first) != nil {
		t.Fatalf("first lease: HTTP %d %s", code, body)
	}
	// Negative control: without a wait the exclusive proxy is a 409 now.
	if code, body := h.curl(t, token, "-d", req, url+"/v1/leases"); code != 409 || !strings.Contains(body, `"atCapacity":1`) {
		t.Errorf("second lease without wait: HTTP %d %s, want 409 no_match with atCapacity 1", code, body)
	}

	type result struct {
		code     int
		body     string
		returned time.Time
	}
	done := make(chan result, 1)
	go func() {
		code, body := h.curlNoFatal(token, "-d", `{"selector":{"tier":"premium"},"target":"origin","ttlSeconds":60,"waitSeconds":30}`, url+"/v1/leases")
		done <- result{code, body, time.Now()}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for h.metric(t, h.env.MetricsURL, `proxy_operator_flowcontrol_queue_length{band="0"}`) != "1" {
		if time.Now().After(deadline) {
			t.Fatal("the waiting request never showed in proxy_operator_flowcontrol_queue_length")
		}
		time.Sleep(20 * time.Millisecond)
	}
	releasedAt := time.Now()
	if code, _ := h.curl(t, token, "-X", "DELETE", url+"/v1/leases/"+first.LeaseID); code != 204 {
		t.Fatalf("release: HTTP %d", code)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(35 * time.Second):
		t.Fatal("the waiting request did not return")
	}
	var second wireLease
	if r.code != 201 || json.Unmarshal([]byte(r.body), &second) != nil {
		t.Fatalf("waiting lease: HTTP %d %s, want 201", r.code, r.body)
	}
	if second.Proxy.Name != first.Proxy.Name {
		t.Errorf("waiter got %s, want the released %s", second.Proxy.Name, first.Proxy.Name)
	}
	t.Logf("waiter granted %s after the release (curl round trip included)", r.returned.Sub(releasedAt).Round(time.Millisecond))
	if d := r.returned.Sub(releasedAt); d > 2*time.Second {
		t.Errorf("waiter returned %s after the release, want promptly", d)
	}
	h.curl(t, token, "-X", "DELETE", url+"/v1/leases/"+second.LeaseID)
}

func (h *harness) proxyLease(t *testing.T) {
	manifest := `{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLease",` +
		`"metadata":{"generateName":"dev-e2e-"},"spec":{"selector":{"tier":"premium"},"target":"origin","ttlSeconds":60}}`
	name := strings.TrimSpace(h.mustKubectlIn(t, manifest, "create", "-f", "-", "-o", "jsonpath={.metadata.name}"))
	if !strings.HasPrefix(name, "dev-e2e-") {
		t.Fatalf("created ProxyLease %q, want a generated dev-e2e- name", name)
	}
	status := strings.Fields(h.mustKubectl(t, "get", "proxylease", name, "-o", "jsonpath={.status.proxy.name} {.status.proxy.url}"))
	if len(status) != 2 {
		t.Fatalf("ProxyLease %s status names no proxy: %q", name, status)
	}
	proxyName, proxyURL := status[0], status[1]
	out, err := exec.Command("curl", "-sS", "--max-time", "10", "-x", proxyURL, h.env.OriginURL+"/via-proxylease").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GET /via-proxylease") {
		t.Errorf("curl -x %s (from ProxyLease %s): %v %q", proxyURL, name, err, out)
	}
	table := h.mustKubectl(t, "get", "proxyleases")
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+` + regexp.QuoteMeta(proxyName) + `\s+origin\s+` + regexp.QuoteMeta(controlplane.AdminUser)).MatchString(table) {
		t.Errorf("kubectl get proxyleases lacks the row NAME PROXY TARGET HOLDER for %s:\n%s", name, table)
	}
	h.mustKubectl(t, "delete", "proxylease", name)
	if pl := h.mustKubectl(t, "get", "proxyleases", "-o", "name"); strings.Contains(pl, name) {
		t.Errorf("deleted ProxyLease still listed:\n%s", pl)
	}
	// Both APIs' requests are counted, each under its api label.
	if v := h.metric(t, h.env.MetricsURL, `proxy_operator_lease_requests_total{api="kubernetes",outcome="granted"}`); v != "1" {
		t.Errorf(`proxy_operator_lease_requests_total{api="kubernetes",outcome="granted"} = %q, want 1`, v)
	}
	if v := h.metric(t, h.env.MetricsURL, `proxy_operator_lease_requests_total{api="http",outcome="granted"}`); v == "" || v == "0" {
		t.Errorf(`proxy_operator_lease_requests_total{api="http",outcome="granted"} = %q, want the HTTP grants of the steps before`, v)
	}
}

// readmeFirstLease runs the commands of README's "First lease in five
// commands" that need no kubelet, as written but in the dev fleet's
// namespace (default, not crawlers): wait for every Proxy Ready, create the
// sample ProxyLease printing its proxy URL, and fetch through that URL (curl
// on this machine stands in for the curl pod).
func (h *harness) readmeFirstLease(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## First lease in five commands")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal("README has no \"First lease in five commands\"")
	}
	// One command of the section: its kubectl arguments, in namespace
	// default, manifest paths from the repository root, quotes removed.
	command := func(prefix string) []string {
		t.Helper()
		for _, line := range strings.Split(section, "\n") {
			line, _, _ = strings.Cut(line, "   #")
			if i := strings.Index(line, prefix); i >= 0 {
				line = strings.TrimSuffix(strings.TrimSpace(line[i+len("kubectl "):]), ")")
				var args []string
				for _, f := range strings.Fields(line) {
					f = strings.ReplaceAll(f, "'", "")
					switch {
					case f == "crawlers":
						f = "default"
					case strings.HasPrefix(f, "artifacts/"):
						f = filepath.Join(root, f)
					}
					args = append(args, f)
				}
				return args
			}
		}
		t.Fatalf("README's first lease has no command %q", prefix)
		return nil
	}
	h.mustKubectl(t, command("kubectl -n crawlers wait proxy")...)
	url := strings.TrimSpace(h.mustKubectl(t, command("kubectl -n crawlers create -f")...))
	if !regexp.MustCompile(`^http://[^:@/]+:[^@/]+@127\.[0-9.]+:3128$`).MatchString(url) {
		t.Fatalf("the ProxyLease's proxy URL is %q, want http://user:password@host:3128", url)
	}
	out, err := exec.Command("curl", "-sS", "--max-time", "10", "-x", url, h.env.OriginURL+"/readme-first-lease").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GET /readme-first-lease") {
		t.Errorf("curl -x <the lease's URL>: %v %q", err, out)
	}
	// Leave no lease behind for the steps after this one.
	rows := h.mustKubectl(t, "get", "proxyleases", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.proxy.url}{"\n"}{end}`)
	deleted := 0
	for _, row := range strings.Split(strings.TrimSpace(rows), "\n") {
		if name, u, _ := strings.Cut(row, " "); u == url {
			h.mustKubectl(t, "delete", "proxylease", name)
			deleted++
		}
	}
	if deleted != 1 {
		t.Errorf("found %d ProxyLeases with the URL the README's command printed, want 1:\n%s", deleted, rows)
	}
}

func (h *harness) mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	return h.mustKubectlIn(t, "", args...)
}

func (h *harness) mustKubectlIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := h.runKubectl(stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runKubectl runs kubectl on the environment; the error carries its output.
func (h *harness) runKubectl(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.kubectl, append([]string{"--kubeconfig", h.env.KubeconfigPath, "--cache-dir", h.cacheDir}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// curl runs curl with a bearer token ("" = none) and returns the status
// code and body.
func (h *harness) curl(t *testing.T, token string, args ...string) (int, string) {
	t.Helper()
	code, body := h.curlNoFatal(token, args...)
	if code == 0 {
		t.Fatalf("curl %s: %s", strings.Join(args, " "), body)
	}
	return code, body
}

// curlNoFatal is curl for goroutines: code 0 and the error text on failure.
// It verifies https:// against the dev CA, as README's commands do.
func (h *harness) curlNoFatal(token string, args ...string) (int, string) {
	full := []string{"-sS", "--max-time", "60", "--cacert", h.env.CAPath, "-w", "\n%{http_code}"}
	if token != "" {
		full = append(full, "-H", "Authorization: Bearer "+token)
	}
	out, err := exec.Command("curl", append(full, args...)...).CombinedOutput()
	if err != nil {
		return 0, fmt.Sprintf("%v: %s", err, out)
	}
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(s, '\n')
	code, _ := strconv.Atoi(s[i+1:])
	if i < 0 {
		return code, ""
	}
	return code, s[:i]
}

// orphanCollected plants a VM in the fake Compute Engine as a crashed
// operator would leave it (this installation's tag, the UID of no Proxy, an
// hour old) next to a young one and an old one of another installation
// (tag proxy-operator, the default every installation shared before tags
// were derived: #26 item 6), and waits for the collector to delete the
// first only; the sample fleet's VMs stay.
func (h *harness) orphanCollected(t *testing.T) {
	if h.env.GCE == nil {
		t.Skip("the dev environment runs against another Compute Engine endpoint")
	}
	var tag string
	for _, in := range h.env.GCE.Instances() {
		if tag == "" {
			tag = in.Labels["proxy-operator-tag"]
		}
	}
	if tag == "" || tag == "proxy-operator" {
		t.Fatalf("the sample fleet's VMs are tagged %q, want this installation's own tag", tag)
	}
	plant := func(name, tag string, created time.Time) {
		t.Helper()
		labels := map[string]string{"proxy-operator-tag": tag, "proxy-operator-uid": "uid-of-a-proxy-long-gone"}
		if err := h.env.GCE.Plant(h.env.GCPProject, "us-central1-a", name, labels, created); err != nil {
			t.Fatal(err)
		}
	}
	plant("proxy-dev-orphan", tag, time.Now().Add(-time.Hour))
	plant("proxy-dev-young", tag, time.Now())
	plant("proxy-other-install", "proxy-operator", time.Now().Add(-time.Hour))
	fleet := func() (names []string, orphan, young bool) {
		for _, in := range h.env.GCE.Instances() {
			switch {
			case in.Name == "proxy-dev-orphan":
				orphan = in.Status != "STOPPING"
			case in.Name == "proxy-dev-young":
				young = true
			default:
				names = append(names, in.Name)
			}
		}
		return names, orphan, young
	}
	before, _, _ := fleet()
	if len(before) < 2 {
		t.Fatal("the sample fleet has no VMs: nothing shows that the collector spares live instances")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, orphan, _ := fleet()
		if !orphan {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the planted orphan VM was not deleted within 30s (--gc-interval=2s)")
		}
		time.Sleep(200 * time.Millisecond)
	}
	after, _, young := fleet()
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the fleet's VMs changed (-before +after):\n%s", diff)
	}
	if !young {
		t.Error("the collector deleted a VM younger than --gc-min-age")
	}
	if v := h.metric(t, h.env.MetricsURL, `proxy_operator_gc_deleted_total{provider="gcp"}`); v != "1" {
		t.Errorf(`proxy_operator_gc_deleted_total{provider="gcp"} = %q, want 1`, v)
	}
}

// observabilityMetrics scrapes the running operator (after the lease, probe,
// provider and GC traffic of the subtests before) and checks that every
// metric the Grafana dashboard and the alert rules query is one it exports:
// a renamed metric would otherwise leave an empty panel and a silent alert.
// A SitePolicy with a higher tier's budget is in place meanwhile: its series
// (the ladder's per-tier ones too) exist only with one.
func (h *harness) observabilityMetrics(t *testing.T) {
	exprs, err := observability.Expressions()
	if err != nil {
		t.Fatal(err)
	}
	const policy = "dev-e2e-metrics"
	h.mustKubectlIn(t, `{"apiVersion":"crawl.example.com/v1alpha1","kind":"SitePolicy","metadata":{"name":"`+policy+`"},`+
		`"spec":{"sites":["metrics.dev-e2e.test"],"maxConcurrency":1,"higherTiers":[{"maxConcurrency":1}]}}`, "create", "-f", "-")
	defer h.mustKubectl(t, "delete", "sitepolicy", policy)
	for deadline := time.Now().Add(10 * time.Second); h.metric(t, h.env.MetricsURL, `proxy_operator_site_tier_leases_live{policy="`+policy+`",tier="1"}`) != "0"; {
		if time.Now().After(deadline) {
			t.Fatal("the SitePolicy's series did not appear within 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, body := h.curl(t, "", h.env.MetricsURL)
	if code != 200 {
		t.Fatalf("GET %s: HTTP %d", h.env.MetricsURL, code)
	}
	exported := families(body)
	// An alert on the aggregated API reads kube-apiserver's own metrics.
	kubeAPIServer := families(h.mustKubectl(t, "get", "--raw", "/metrics"))
	if !kubeAPIServer["aggregator_unavailable_apiservice"] {
		t.Errorf("kube-apiserver exports no aggregator_unavailable_apiservice (%d families)", len(kubeAPIServer))
	}
	// Negative control: the scrape is real, and a made-up name is missing.
	if !exported["proxy_operator_leases_active"] || exported["proxy_operator_no_such_metric"] {
		t.Fatalf("the scrape looks wrong: %d metric families", len(exported))
	}
	checked := 0
	for where, expr := range exprs {
		names := observability.MetricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, name := range names {
			checked++
			if !exported[name] && !(strings.HasPrefix(name, "aggregator_") && kubeAPIServer[name]) {
				t.Errorf("%s queries %s, which the operator does not export", where, name)
			}
		}
	}
	t.Logf("%d metric references in %d expressions checked", checked, len(exprs))

	// The docs name only metrics it exports.
	for doc, names := range documentedMetrics(t) {
		for _, name := range names {
			if !exported[name] {
				t.Errorf("%s names the metric %s, which the operator does not export", doc, name)
			}
		}
	}
}

// families are the metric families of a /metrics page, a histogram's
// series (name_bucket, _sum, _count) included.
func families(page string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(page, "\n") {
		// "# TYPE name kind"
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		out[f[2]] = true
		if f[3] == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				out[f[2]+suffix] = true
			}
		}
	}
	return out
}

// documentedMetrics are the proxy_operator_… names of README.md,
// CONTRIBUTING.md and docs/*.md, by file, less the others that share the
// prefix: the Scrapy middleware's request.meta keys (META_… in
// clients/python/proxy_operator/middleware.py) and the Squid ACL the
// operator writes (pkg/proxyauth/config.go).
func documentedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mw, err := os.ReadFile(filepath.Join(root, "clients/python/proxy_operator/middleware.py"))
	if err != nil {
		t.Fatal(err)
	}
	metaKeys := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^META_[A-Z_]+ = "([a-z_]+)"`).FindAllStringSubmatch(string(mw), -1) {
		metaKeys[m[1]] = true
	}
	if !metaKeys["proxy_operator_skip"] {
		t.Fatalf("no META_ keys read from middleware.py (%v)", metaKeys)
	}
	squid, err := os.ReadFile(filepath.Join(root, "pkg/proxyauth/config.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"acl (proxy_operator_[a-z_]+) `).FindAllStringSubmatch(string(squid), -1) {
		metaKeys[m[1]] = true
	}
	if !metaKeys["proxy_operator_lease"] {
		t.Fatal("no Squid ACL name read from pkg/proxyauth/config.go")
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md"))
	out := map[string][]string{}
	nameRE := regexp.MustCompile(`\bproxy_operator_[a-z_]*[a-z]\b`)
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range nameRE.FindAllString(string(b), -1) {
			if !metaKeys[name] {
				out[filepath.Base(doc)] = append(out[filepath.Base(doc)], name)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the docs name no metric: the pattern is wrong")
	}
	return out
}

// metric returns the value of one sample of /metrics ("" if absent).
func (h *harness) metric(t *testing.T, metricsURL, series string) string {
	t.Helper()
	code, body := h.curl(t, "", metricsURL)
	if code != 200 {
		t.Fatalf("GET %s: HTTP %d", metricsURL, code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func dumpLogs(t *testing.T, dir string) {
	for _, name := range []string{"operator.log", "operator-0.log", "operator-1.log", "dev.log", "nodeagent.log"} {
		b, err := os.ReadFile(filepath.Join(dir, devenv.LogsDir, name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		t.Logf("--- last lines of %s ---\n%s", name, strings.Join(lines, "\n"))
	}
}
