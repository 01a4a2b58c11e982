package app

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/artifacts/operator"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
)

func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.Validate()
}

// parseDev is parse with the discovery API on plain HTTP and the
// operator's namespace named, as a local run asks for them.
func parseDev(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	return parse(t, append([]string{"--discovery-plain-http", "--namespace=proxy-operator-system"}, args...)...)
}

// parseInPod is parse as the operator reads its flags in a pod of namespace
// ns (the default of --namespace there).
func parseInPod(t *testing.T, ns string, args ...string) (*Options, error) {
	t.Helper()
	return parse(t, append([]string{"--namespace=" + ns}, args...)...)
}

// The defaults are valid but for one choice the operator will not make
// alone: how the HTTP discovery API serves its bearer tokens. Out of a
// cluster it must also be told its namespace, where the proxy auth key is.
func TestDefaultsAreValid(t *testing.T) {
	if _, err := parseInPod(t, "proxy-operator-system"); !errors.Is(err, discovery.ErrNoServingCert) || strings.Contains(err.Error(), "proxy-auth") {
		t.Fatalf("defaults in a pod: %v, want only %v", err, discovery.ErrNoServingCert)
	}
	if _, err := parse(t, "--discovery-plain-http"); err == nil || !strings.Contains(err.Error(), "--proxy-auth-secret: the operator's namespace is unknown") {
		t.Fatalf("defaults out of a cluster: %v, want the proxy auth key's namespace asked for", err)
	}
	if _, err := parse(t, "--discovery-plain-http", "--proxy-auth-secret="); err != nil {
		t.Fatalf("proxy auth off out of a cluster: %v", err)
	}
	o, err := parseDev(t)
	if err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if o.PprofAddr != "0" {
		t.Errorf("the profiler is on by default (%q)", o.PprofAddr)
	}
	if o.Intervals != controller.DefaultIntervals() {
		t.Errorf("default intervals %+v, want the controller's %+v", o.Intervals, controller.DefaultIntervals())
	}
}

func TestFlags(t *testing.T) {
	o, err := parseDev(t, "--leader-elect", "--leader-election-namespace=ops", "--providers=kubernetes",
		"--drift-poll-interval=30s", "--quota-retry-interval=10m", "--kubernetes-pod-namespace=proxies",
		"--kubernetes-pod-node-name=node-1", "--kubernetes-allowed-images=example.org/squid:7,example.org/squid:8",
		"--kubernetes-allow-proxy-node-name", "--kubeconfig=/dev/null", "--zap-log-level=debug", "--pprof-bind-address=127.0.0.1:6060",
		"--serving-shutdown-delay=5s")
	if err != nil {
		t.Fatal(err)
	}
	if !o.Election.Enabled || o.Serving.ShutdownDelay != 5*time.Second || o.Election.Namespace != "ops" || o.Intervals.DriftPoll != 30*time.Second ||
		o.Intervals.QuotaRetry != 10*time.Minute || o.Kubernetes.Namespace != "proxies" || o.Kubernetes.NodeName != "node-1" ||
		o.PprofAddr != "127.0.0.1:6060" || !o.Kubernetes.AllowProxyNodeName ||
		!slices.Equal(o.Kubernetes.AllowedImages, []string{"example.org/squid:7", "example.org/squid:8"}) {
		t.Errorf("parsed options %+v", o)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	_, err := parse(t, "--providers=kubernetes,gcp2,kubernetes", "--instance-tag=Bad Tag", "--drift-poll-interval=0s",
		"--kubernetes-pod-namespace=Bad_NS", "--kubernetes-allowed-images=a b", "--leader-elect", "--leader-election-id=",
		"--serving-shutdown-delay=1m")
	if err == nil {
		t.Fatal("invalid options accepted")
	}
	for _, want := range []string{`unknown provider "gcp2"`, `"kubernetes" listed twice`, `--instance-tag "Bad Tag"`,
		"--drift-poll-interval: must be positive", "--kubernetes-pod-namespace", `--kubernetes-allowed-images: "a b"`, "--leader-election-id: required",
		"--serving-shutdown-delay: 1m0s is outside [0s, 20s]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// The example Deployment's arguments are flags this binary accepts.
func TestDeploymentManifestArgs(t *testing.T) {
	data, err := operator.FS.ReadFile("operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		found = true
		args := d.Spec.Template.Spec.Containers[0].Args
		o, err := parseInPod(t, d.Namespace, args...)
		if err != nil {
			t.Fatalf("manifest args %v: %v", args, err)
		}
		if !o.Election.Enabled {
			t.Error("the Deployment must enable leader election")
		}
	}
	if !found {
		t.Fatal("no Deployment in operator.yaml")
	}
}

func TestGCPFlags(t *testing.T) {
	o, err := parseDev(t, "--providers=kubernetes,gcp", "--gcp-project=crawl-prod", "--gcp-endpoint=http://127.0.0.1:9999",
		"--gcp-request-timeout=7s", "--create-retry-interval=45s")
	if err != nil {
		t.Fatal(err)
	}
	if o.GCP.Project != "crawl-prod" || o.GCP.Endpoint != "http://127.0.0.1:9999" || o.GCP.RequestTimeout != 7*time.Second || o.Intervals.CreateRetry != 45*time.Second {
		t.Errorf("parsed gcp options %+v, create retry %s", o.GCP, o.Intervals.CreateRetry)
	}
	// gcp enabled: its options are checked, and the tag must be a GCE label value.
	_, err = parseDev(t, "--providers=gcp", "--instance-tag=Proxy.Operator", "--gcp-endpoint=127.0.0.1:9999")
	for _, want := range []string{"--gcp-project: required", "--gcp-endpoint", `--instance-tag "Proxy.Operator"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	// gcp not enabled: its options are not required (negative control).
	if _, err := parseDev(t, "--providers=kubernetes", "--instance-tag=Proxy.Operator"); err != nil {
		t.Errorf("gcp options checked while gcp is disabled: %v", err)
	}
}

func TestGCOptions(t *testing.T) {
	o, err := parseDev(t, "--gc-interval=1m", "--gc-min-age=30s", "--gc-dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if o.GC.Interval != time.Minute || o.GC.MinAge != 30*time.Second || !o.GC.DryRun {
		t.Errorf("parsed gc options %+v", o.GC)
	}
	if d := NewOptions().GC; d.Interval != 10*time.Minute || d.MinAge != 10*time.Minute {
		t.Errorf("default gc options %+v, want 10m and 10m", d)
	}
	// A namespaced cache sees only some Proxies: the collector is refused
	// at startup unless allowed or disabled.
	_, err = parseDev(t, "--watch-namespaces=team-a,team-b")
	if err == nil || !strings.Contains(err.Error(), "--gc-allow-namespaced") || !strings.Contains(err.Error(), "team-a, team-b") {
		t.Errorf("--watch-namespaces without --gc-allow-namespaced: %v, want a refusal naming the flag and the namespaces", err)
	}
	for _, ok := range [][]string{
		{"--watch-namespaces=team-a", "--gc-allow-namespaced"},
		{"--watch-namespaces=team-a", "--gc-interval=0"},
	} {
		if _, err := parseDev(t, ok...); err != nil {
			t.Errorf("%v: %v, want accepted", ok, err)
		}
	}
	_, err = parseDev(t, "--gc-interval=-1s", "--gc-min-age=0s", "--watch-namespaces=Bad_NS", "--gc-allow-namespaced")
	for _, want := range []string{"--gc-interval", "--gc-min-age", `--watch-namespaces "Bad_NS"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}
