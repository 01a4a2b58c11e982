package crd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/artifacts/examples"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

// env is the package's one control plane, started by TestMain.
var env struct {
	cp     *controlplane.ControlPlane
	cfg    *rest.Config
	client client.Client
}

func TestMain(m *testing.M) { os.Exit(framework.Main(m, "crd", setup)) }

// setup starts the package's control plane (CRDs installed) and its
// client.
func setup(ctx context.Context, e *framework.Env) error {
	cp, err := e.ControlPlane(ctx, controlplane.Options{})
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := crawlv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	c, err := framework.Client(cp, scheme)
	if err != nil {
		return err
	}
	env.cp, env.cfg, env.client = cp, cp.RESTConfig(), c
	return nil
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.client.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// proxyFromJSON builds an unstructured Proxy whose spec is the given JSON, so
// zero values and wrong types reach the apiserver exactly as written (a typed
// Go object would drop them through omitempty).
func proxyFromJSON(t *testing.T, namespace, name, specJSON string) *unstructured.Unstructured {
	t.Helper()
	return fromJSON(t, "Proxy", namespace, name, specJSON)
}

// fromJSON builds an unstructured object of kind (of the crawl API) whose
// spec is the given JSON ("": none); namespace "" for a cluster-scoped kind.
func fromJSON(t *testing.T, kind, namespace, name, specJSON string) *unstructured.Unstructured {
	t.Helper()
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	obj := map[string]any{
		"apiVersion": crawlv1alpha1.SchemeGroupVersion.String(),
		"kind":       kind,
		"metadata":   meta,
	}
	if specJSON != "" {
		var spec any
		if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
			t.Fatalf("bad test spec %s: %v", specJSON, err)
		}
		obj["spec"] = spec
	}
	return &unstructured.Unstructured{Object: obj}
}

// rejectedAsInvalid: kube-apiserver refuses obj (a dry run) with 422
// Invalid, its message naming want.
func rejectedAsInvalid(t *testing.T, ctx context.Context, obj client.Object, want string) {
	t.Helper()
	err := env.client.Create(ctx, obj, client.DryRunAll)
	if err == nil {
		t.Fatalf("%s accepted, want %q", obj.GetName(), want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error is not 422 Invalid: %v", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error does not name the field:\n got: %v\nwant substring: %s", err, want)
	}
}

const (
	pem      = `-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n`
	longName = "a123456789b123456789c123456789d123456789e123456789f123456789g123" // 64 chars
)

func manyAttributes(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return `{"provider":"kubernetes","attributes":{` + strings.Join(parts, ",") + `}}`
}

// TestInvalidProxiesAreRejected sends specs a user could plausibly get wrong;
// each must be refused with 422 Invalid and a message that names the field.
func TestInvalidProxiesAreRejected(t *testing.T) {
	ctx := ctxFor(t)
	ns := newNamespace(t, ctx, "invalid")

	// Negative control: the specs below are these plus one mistake each, so
	// these must be accepted or the table proves nothing.
	for name, spec := range map[string]string{
		"control-managed":  `{"provider":"kubernetes"}`,
		"control-external": `{"mode":"External","endpoint":{"host":"127.0.0.1"}}`,
		"control-gcp":      `{"provider":"gcp","gcp":{"zone":"us-central1-a","machineType":"e2-small","image":"debian-12"}}`,
		// An interval of 5 with the default timeout (5): refused before (#29).
		"control-interval-5": `{"provider":"kubernetes","healthCheck":{"intervalSeconds":5}}`,
		"control-interval-3": `{"provider":"kubernetes","healthCheck":{"intervalSeconds":3,"timeoutSeconds":3}}`,
		"control-full": `{"provider":"kubernetes","attributes":{"region":"eu-west","tier":""},
			"cloudInit":{"secretRef":{"name":"ci","key":"user-data"}},
			"kubernetes":{"image":"ubuntu/squid:6.6","nodeName":"node-1"},
			"healthCheck":{"url":"https://example.org/x","intervalSeconds":10,"timeoutSeconds":9,"successThreshold":2,
				"failureThreshold":5,"expectedStatus":204,"tls":{"serverName":"example.org","caBundle":"` + pem + `"}}}`,
	} {
		if err := env.client.Create(ctx, proxyFromJSON(t, ns, name, spec), client.DryRunAll); err != nil {
			t.Fatalf("control spec %s rejected: %v", name, err)
		}
	}

	tests := []struct {
		name string
		spec string // JSON of .spec; "" leaves spec out
		want string // substring of the apiserver's message: the field path and the rule
	}{
		// mode / provider / endpoint coherence
		{"spec missing", "", "spec: Required value"},
		{"managed without provider", `{}`, "spec.provider: Required value: spec.provider is required when spec.mode is Managed"},
		{"managed with endpoint", `{"provider":"kubernetes","endpoint":{"host":"h"}}`, "spec.endpoint is forbidden when spec.mode is Managed"},
		{"external without endpoint", `{"mode":"External"}`, "spec.endpoint: Required value: spec.endpoint is required when spec.mode is External"},
		{"external with provider", `{"mode":"External","provider":"kubernetes","endpoint":{"host":"h"}}`, "spec.provider is forbidden when spec.mode is External"},
		{"external with cloudInit", `{"mode":"External","endpoint":{"host":"h"},"cloudInit":{"userData":"x"}}`, "spec.cloudInit is forbidden when spec.mode is External"},
		{"external with kubernetes block", `{"mode":"External","endpoint":{"host":"h"},"kubernetes":{}}`, "spec.kubernetes is forbidden when spec.mode is External"},
		{"external with gcp block", `{"mode":"External","endpoint":{"host":"h"},"gcp":{"zone":"z1","machineType":"m1","image":"i"}}`, "spec.gcp is forbidden when spec.mode is External"},
		{"unknown mode", `{"mode":"Hybrid","provider":"kubernetes"}`, `spec.mode: Unsupported value: "Hybrid"`},
		{"empty provider", `{"provider":""}`, "spec.provider: Invalid value"},
		{"provider not a name", `{"provider":"Kube_Provider"}`, "spec.provider: Invalid value"},
		// provider blocks match the provider
		{"kubernetes block with gcp provider", `{"provider":"gcp","gcp":{"zone":"z1","machineType":"m1","image":"i"},"kubernetes":{}}`, "spec.kubernetes is only allowed when spec.provider is kubernetes"},
		{"gcp block with kubernetes provider", `{"provider":"kubernetes","gcp":{"zone":"z1","machineType":"m1","image":"i"}}`, "spec.gcp is only allowed when spec.provider is gcp"},
		{"gcp provider without gcp block", `{"provider":"gcp"}`, "spec.gcp: Required value: spec.gcp is required when spec.provider is gcp"},
		{"gcp block without zone", `{"provider":"gcp","gcp":{"machineType":"m1","image":"i"}}`, "spec.gcp.zone: Required value"},
		{"gcp machineType with spaces", `{"provider":"gcp","gcp":{"zone":"z1","machineType":"E2 Small","image":"i"}}`, "spec.gcp.machineType: Invalid value"},
		{"gcp label key uppercase", `{"provider":"gcp","gcp":{"zone":"z1","machineType":"m1","image":"i","labels":{"Team":"crawl"}}}`, "spec.gcp.labels keys must start with a lowercase letter"},
		{"gcp label value invalid", `{"provider":"gcp","gcp":{"zone":"z1","machineType":"m1","image":"i","labels":{"team":"Crawl!"}}}`, "spec.gcp.labels.team: Invalid value"},
		{"gcp tag invalid", `{"provider":"gcp","gcp":{"zone":"z1","machineType":"m1","image":"i","tags":["Proxy_Tag"]}}`, "spec.gcp.tags[0]: Invalid value"},
		{"kubernetes nodeName invalid", `{"provider":"kubernetes","kubernetes":{"nodeName":"Node 1"}}`, "spec.kubernetes.nodeName: Invalid value"},
		// cloudInit one-of
		{"cloudInit with both", `{"provider":"kubernetes","cloudInit":{"userData":"x","secretRef":{"name":"s"}}}`, "spec.cloudInit must set exactly one of spec.cloudInit.userData or spec.cloudInit.secretRef"},
		{"cloudInit with neither", `{"provider":"kubernetes","cloudInit":{}}`, "spec.cloudInit must set exactly one of spec.cloudInit.userData or spec.cloudInit.secretRef"},
		{"cloudInit empty userData", `{"provider":"kubernetes","cloudInit":{"userData":""}}`, "spec.cloudInit.userData: Invalid value"},
		{"secretRef without name", `{"provider":"kubernetes","cloudInit":{"secretRef":{"key":"k"}}}`, "spec.cloudInit.secretRef.name: Required value"},
		{"secretRef name invalid", `{"provider":"kubernetes","cloudInit":{"secretRef":{"name":"Bad_Name"}}}`, "spec.cloudInit.secretRef.name: Invalid value"},
		// endpoint
		{"endpoint without host", `{"mode":"External","endpoint":{"port":3128}}`, "spec.endpoint.host: Required value"},
		{"endpoint empty host", `{"mode":"External","endpoint":{"host":""}}`, "spec.endpoint.host: Invalid value"},
		{"endpoint host is a URL", `{"mode":"External","endpoint":{"host":"http://proxy.example.net"}}`, "spec.endpoint.host must be a DNS name or an IP address"},
		{"endpoint port zero", `{"mode":"External","endpoint":{"host":"h","port":0}}`, "spec.endpoint.port: Invalid value: 0"},
		{"endpoint port too high", `{"mode":"External","endpoint":{"host":"h","port":65536}}`, "spec.endpoint.port: Invalid value: 65536"},
		// health check
		{"health url ftp", `{"provider":"kubernetes","healthCheck":{"url":"ftp://example.com/"}}`, "spec.healthCheck.url must be an absolute http or https URL with a host"},
		{"health url relative", `{"provider":"kubernetes","healthCheck":{"url":"/healthz"}}`, "spec.healthCheck.url must be an absolute http or https URL with a host"},
		{"health url without host", `{"provider":"kubernetes","healthCheck":{"url":"http://"}}`, "spec.healthCheck.url must be an absolute http or https URL with a host"},
		{"health timeout over interval", `{"provider":"kubernetes","healthCheck":{"intervalSeconds":5,"timeoutSeconds":6}}`, "spec.healthCheck.timeoutSeconds (default 5) must not exceed spec.healthCheck.intervalSeconds"},
		{"health interval below default timeout", `{"provider":"kubernetes","healthCheck":{"intervalSeconds":3}}`, "with an interval under 5 seconds, set timeoutSeconds too"},
		{"health interval zero", `{"provider":"kubernetes","healthCheck":{"intervalSeconds":0}}`, "spec.healthCheck.intervalSeconds: Invalid value: 0"},
		{"health successThreshold zero", `{"provider":"kubernetes","healthCheck":{"successThreshold":0}}`, "spec.healthCheck.successThreshold: Invalid value: 0"},
		{"health failureThreshold zero", `{"provider":"kubernetes","healthCheck":{"failureThreshold":0}}`, "spec.healthCheck.failureThreshold: Invalid value: 0"},
		{"health failureThreshold negative", `{"provider":"kubernetes","healthCheck":{"failureThreshold":-1}}`, "spec.healthCheck.failureThreshold: Invalid value: -1"},
		{"health expectedStatus 99", `{"provider":"kubernetes","healthCheck":{"expectedStatus":99}}`, "spec.healthCheck.expectedStatus: Invalid value: 99"},
		{"health expectedStatus 600", `{"provider":"kubernetes","healthCheck":{"expectedStatus":600}}`, "spec.healthCheck.expectedStatus: Invalid value: 600"},
		{"health tls with http url", `{"provider":"kubernetes","healthCheck":{"url":"http://example.com/","tls":{"insecureSkipVerify":true}}}`, "spec.healthCheck.tls is only allowed when spec.healthCheck.url is an https URL"},
		{"health tls skip verify with caBundle", `{"provider":"kubernetes","healthCheck":{"url":"https://example.com/","tls":{"insecureSkipVerify":true,"caBundle":"` + pem + `"}}}`, "spec.healthCheck.tls.caBundle must not be set when spec.healthCheck.tls.insecureSkipVerify is true"},
		{"health tls caBundle not PEM", `{"provider":"kubernetes","healthCheck":{"url":"https://example.com/","tls":{"caBundle":"not a cert"}}}`, "spec.healthCheck.tls.caBundle must hold PEM-encoded certificates"},
		// attributes
		{"attribute key starts with dash", `{"provider":"kubernetes","attributes":{"-region":"eu"}}`, "spec.attributes keys must be 1-63 characters"},
		{"attribute key too long", `{"provider":"kubernetes","attributes":{"` + longName + `":"eu"}}`, "spec.attributes keys must be 1-63 characters"},
		{"attribute key with slash", `{"provider":"kubernetes","attributes":{"example.com/region":"eu"}}`, "spec.attributes keys must be 1-63 characters"},
		{"attribute value too long", `{"provider":"kubernetes","attributes":{"region":"` + longName + `"}}`, "spec.attributes.region: Too long"},
		{"attribute value with space", `{"provider":"kubernetes","attributes":{"region":"eu west"}}`, "spec.attributes.region: Invalid value"},
		{"too many attributes", manyAttributes(33), "spec.attributes: Too many: 33"},
	}
	if len(tests) < 25 {
		t.Fatalf("only %d invalid specs; the issue asks for at least 25", len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := proxyFromJSON(t, ns, fmt.Sprintf("invalid-%d", i), tt.spec)
			// Dry run: validation runs in full, and a spec that wrongly
			// passes leaves nothing behind to confuse the other cases.
			err := env.client.Create(ctx, obj, client.DryRunAll)
			if err == nil {
				t.Fatalf("spec %s was accepted, want it rejected with %q", tt.spec, tt.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error is not 422 Invalid: %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error does not name the field:\n got: %v\nwant substring: %s", err, tt.want)
			}
			t.Logf("rejected: %v", err)
		})
	}
}

func defaultHealthCheck() crawlv1alpha1.HealthCheck {
	return crawlv1alpha1.HealthCheck{
		URL:              crawlv1alpha1.DefaultHealthCheckURL,
		IntervalSeconds:  30,
		TimeoutSeconds:   5,
		SuccessThreshold: 1,
		FailureThreshold: 3,
		ExpectedStatus:   200,
	}
}

// TestMinimalProxiesGetDefaults creates minimal valid specs and checks the
// stored spec the apiserver returns, defaults included.
func TestMinimalProxiesGetDefaults(t *testing.T) {
	ctx := ctxFor(t)
	ns := newNamespace(t, ctx, "defaults")

	partialHC := defaultHealthCheck()
	partialHC.IntervalSeconds = 10
	partialHC.URL = "https://example.org/"

	tests := []struct {
		name string
		spec crawlv1alpha1.ProxySpec
		want crawlv1alpha1.ProxySpec
	}{
		{
			name: "managed",
			spec: crawlv1alpha1.ProxySpec{Provider: "kubernetes"},
			want: crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: "kubernetes", HealthCheck: defaultHealthCheck()},
		},
		{
			name: "external",
			spec: crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeExternal, Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1"}},
			want: crawlv1alpha1.ProxySpec{
				Mode:        crawlv1alpha1.ModeExternal,
				Endpoint:    &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: crawlv1alpha1.ProxyPort},
				HealthCheck: defaultHealthCheck(),
			},
		},
		{
			name: "secret key defaults",
			spec: crawlv1alpha1.ProxySpec{
				Provider:  "kubernetes",
				CloudInit: &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "ci"}},
			},
			want: crawlv1alpha1.ProxySpec{
				Mode: crawlv1alpha1.ModeManaged, Provider: "kubernetes", HealthCheck: defaultHealthCheck(),
				CloudInit: &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "ci", Key: "userData"}},
			},
		},
		{
			name: "partial health check keeps what is set",
			spec: crawlv1alpha1.ProxySpec{
				Provider:    "kubernetes",
				HealthCheck: crawlv1alpha1.HealthCheck{URL: "https://example.org/", IntervalSeconds: 10},
			},
			want: crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: "kubernetes", HealthCheck: partialHC},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &crawlv1alpha1.Proxy{
				ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(tt.name, " ", "-"), Namespace: ns},
				Spec:       tt.spec,
			}
			if err := env.client.Create(ctx, p); err != nil {
				t.Fatalf("create: %v", err)
			}
			got := &crawlv1alpha1.Proxy{}
			if err := env.client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
				t.Fatalf("get: %v", err)
			}
			if diff := cmp.Diff(tt.want, got.Spec); diff != "" {
				t.Errorf("stored spec (-want +got):\n%s", diff)
			}
		})
	}

	// A spec with no healthCheck key at all (not even {}) is defaulted too:
	// typed Go clients always send the struct, kubectl users often do not.
	raw := proxyFromJSON(t, ns, "no-health-key", `{"provider":"kubernetes"}`)
	if err := env.client.Create(ctx, raw); err != nil {
		t.Fatalf("create without healthCheck: %v", err)
	}
	got := &crawlv1alpha1.Proxy{}
	if err := env.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "no-health-key"}, got); err != nil {
		t.Fatalf("get: %v", err)
	}
	if diff := cmp.Diff(defaultHealthCheck(), got.Spec.HealthCheck); diff != "" {
		t.Errorf("healthCheck of a spec without the key (-want +got):\n%s", diff)
	}
}

// TestStatusSubresource checks that status is written only through /status
// and is validated there too.
func TestStatusSubresource(t *testing.T) {
	ctx := ctxFor(t)
	ns := newNamespace(t, ctx, "status")
	p := builders.Proxy(ns, "p").Provider("kubernetes").Obj()
	if err := env.client.Create(ctx, p); err != nil {
		t.Fatalf("create: %v", err)
	}

	// A status written with the main resource is dropped.
	p.Status.Phase = crawlv1alpha1.PhaseReady
	p.Spec.Attributes = map[string]string{"tier": "gold"}
	if err := env.client.Update(ctx, p); err != nil {
		t.Fatalf("update: %v", err)
	}
	if p.Status.Phase != "" {
		t.Errorf("status.phase = %q after a main-resource update, want it ignored", p.Status.Phase)
	}
	if p.Generation != 2 {
		t.Errorf("generation = %d after a spec edit, want 2", p.Generation)
	}

	// Through /status it sticks and does not bump the generation.
	p.Status = crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.PhaseReady, IP: "127.0.0.5", LatencyMillis: ptr(int64(12)), ObservedGeneration: 2}
	if err := env.client.Status().Update(ctx, p); err != nil {
		t.Fatalf("status update: %v", err)
	}
	if p.Status.Phase != crawlv1alpha1.PhaseReady || p.Generation != 2 {
		t.Errorf("after status update phase=%q generation=%d, want Ready and 2", p.Status.Phase, p.Generation)
	}

	// An unknown phase is refused, naming the field.
	bad := p.DeepCopy()
	bad.Status.Phase = "Sleeping"
	err := env.client.Status().Update(ctx, bad)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `status.phase: Unsupported value: "Sleeping"`) {
		t.Errorf("status update with phase Sleeping: got %v, want Invalid naming status.phase", err)
	}
}

// TestExamplesAreValid applies every shipped example (the dev fleet and the
// single-resource examples), so an example can never drift from the schema.
func TestExamplesAreValid(t *testing.T) {
	ctx := ctxFor(t)
	applied, err := controlplane.ApplyFS(ctx, env.cfg, examples.All)
	if err != nil {
		t.Fatalf("applying examples: %v (applied so far: %v)", err, applied)
	}
	var proxies []string
	for _, ref := range applied {
		if strings.HasPrefix(strings.ToLower(ref), "proxy/") {
			proxies = append(proxies, ref)
		}
	}
	// fleet: proxy-a, proxy-b, vm-us, vm-eu; top level: external-1, gcp-1.
	if len(proxies) != 6 {
		t.Errorf("applied proxies %v, want 6 (4 in the fleet, external-1, gcp-1)", proxies)
	}

	fleet, err := controlplane.ApplyFS(ctx, env.cfg, examples.Fleet)
	if err != nil {
		t.Fatalf("applying the fleet: %v", err)
	}
	var fleetProxies int
	for _, ref := range fleet {
		if strings.HasPrefix(strings.ToLower(ref), "proxy/") {
			fleetProxies++
		}
	}
	if fleetProxies != 4 {
		t.Errorf("the dev fleet has %d proxies (%v), want 4 managed ones (2 pods, 2 VMs)", fleetProxies, fleet)
	}

	// The Secret a fleet proxy references carries the label the operator's
	// cache selects on.
	secret := &corev1.Secret{}
	if err := env.client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "proxy-cloud-init"}, secret); err != nil {
		t.Fatalf("getting the example cloud-init Secret: %v", err)
	}
	if secret.Labels[crawlv1alpha1.CloudInitSecretLabel] != "true" {
		t.Errorf("example Secret labels %v lack %s=true", secret.Labels, crawlv1alpha1.CloudInitSecretLabel)
	}
}

func ptr[T any](v T) *T { return &v }

// kubectl runs bin/kubectl against the control plane.
func kubectl(t *testing.T, ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bin, berr := kubectlPath()
	if berr != nil {
		t.Fatalf("%v", berr)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", env.cp.KubeconfigPath}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func kubectlPath() (string, error) {
	dir := os.Getenv(controlplane.BinDirEnv)
	if dir == "" {
		root, err := controlplane.RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin")
	}
	p := filepath.Join(dir, "kubectl")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kubectl not found (hack/tools/install.sh builds it): %w", err)
	}
	return p, nil
}

func TestKubectlGetPrintsColumns(t *testing.T) {
	ctx := ctxFor(t)
	ns := newNamespace(t, ctx, "kubectl-get")
	ready := builders.Proxy(ns, "ready-proxy").Provider("kubernetes").Obj()
	if err := env.client.Create(ctx, ready); err != nil {
		t.Fatalf("create: %v", err)
	}
	ready.Status = crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.PhaseReady, IP: "127.0.0.5", LatencyMillis: ptr(int64(42)), ProviderID: "pods/proxy-abc"}
	if err := env.client.Status().Update(ctx, ready); err != nil {
		t.Fatalf("status update: %v", err)
	}
	external := builders.Proxy(ns, "external-proxy").External("127.0.0.9", 0).Obj()
	if err := env.client.Create(ctx, external); err != nil {
		t.Fatalf("create: %v", err)
	}

	wantHeader := []string{"NAME", "PHASE", "IP", "LATENCY", "PROVIDER", "AGE"}
	for _, resource := range []string{"proxies", "proxy", "px", "proxies.crawl.example.com"} {
		t.Run(resource, func(t *testing.T) {
			out, stderr, err := kubectl(t, ctx, "", "get", resource, "-n", ns)
			if err != nil {
				t.Fatalf("kubectl get %s: %v\n%s", resource, err, stderr)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if diff := cmp.Diff(wantHeader, strings.Fields(lines[0])); diff != "" {
				t.Errorf("header (-want +got):\n%s\nfull output:\n%s", diff, out)
			}
			rows := map[string][]string{}
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				rows[f[0]] = f
			}
			// AGE varies; compare everything before it.
			if got := rows["ready-proxy"]; len(got) != 6 || !cmp.Equal(got[:5], []string{"ready-proxy", "Ready", "127.0.0.5", "42", "kubernetes"}) {
				t.Errorf("ready-proxy row = %q, want [ready-proxy Ready 127.0.0.5 42 kubernetes <age>]\n%s", got, out)
			}
			// A CRD column without a value prints blank, so only NAME and
			// AGE remain; a wrongly filled column would add a field.
			if got := rows["external-proxy"]; len(got) != 2 {
				t.Errorf("external-proxy row = %q, want only its name and age\n%s", got, out)
			}
		})
	}

	t.Run("wide", func(t *testing.T) {
		out, stderr, err := kubectl(t, ctx, "", "get", "px", "-n", ns, "-o", "wide")
		if err != nil {
			t.Fatalf("kubectl get px -o wide: %v\n%s", err, stderr)
		}
		header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		want := []string{"NAME", "PHASE", "IP", "LATENCY", "PROVIDER", "AGE", "MODE", "PROVIDER", "ID"}
		if diff := cmp.Diff(want, header); diff != "" {
			t.Errorf("wide header (-want +got):\n%s", diff)
		}
		if !strings.Contains(out, "pods/proxy-abc") || !strings.Contains(out, "External") {
			t.Errorf("wide output lacks the provider ID or mode:\n%s", out)
		}
	})

	t.Run("category crawl", func(t *testing.T) {
		out, stderr, err := kubectl(t, ctx, "", "get", "crawl", "-n", ns)
		if err != nil {
			t.Fatalf("kubectl get crawl: %v\n%s", err, stderr)
		}
		// The category holds only proxies, so kubectl prints their table.
		for _, want := range []string{"ready-proxy", "external-proxy", "LATENCY"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl get crawl output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("negative control: unknown short name", func(t *testing.T) {
		_, stderr, err := kubectl(t, ctx, "", "get", "pxx", "-n", ns)
		if err == nil || !strings.Contains(stderr, "pxx") {
			t.Errorf("kubectl get pxx: err=%v stderr=%q, want a failure naming pxx", err, stderr)
		}
	})
}

// TestKubectlCreateShowsFieldInError is what a user sees applying a bad
// manifest: the CEL message with the field.
func TestKubectlCreateShowsFieldInError(t *testing.T) {
	ctx := ctxFor(t)
	manifest := `apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata:
  name: no-endpoint
spec:
  mode: External
`
	_, stderr, err := kubectl(t, ctx, manifest, "create", "--dry-run=server", "-f", "-")
	if err == nil {
		t.Fatalf("kubectl create of an External proxy without endpoint succeeded")
	}
	if !strings.Contains(stderr, "spec.endpoint is required when spec.mode is External") {
		t.Errorf("kubectl stderr does not name spec.endpoint:\n%s", stderr)
	}
}

func TestKubectlExplain(t *testing.T) {
	ctx := ctxFor(t)
	// The apiserver publishes a new CRD's OpenAPI asynchronously; wait for it.
	var out, stderr string
	var err error
	deadline := time.Now().Add(45 * time.Second)
	for {
		out, stderr, err = kubectl(t, ctx, "", "explain", "proxy.spec.healthCheck")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("kubectl explain proxy.spec.healthCheck: %v\n%s", err, stderr)
	}
	// kubectl wraps descriptions to the terminal width: compare with all
	// whitespace runs collapsed.
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"GROUP: crawl.example.com",
		"KIND: Proxy",
		"healthCheck configures the probes sent through the proxy",
		"intervalSeconds <integer> intervalSeconds is the time between two probes of this proxy. Defaults to 30.",
		"timeoutSeconds <integer> timeoutSeconds bounds one probe; it must not exceed intervalSeconds (a proxy is never probed twice at once). Defaults to 5: set it with an intervalSeconds under 5.",
		"successThreshold <integer>",
		"failureThreshold <integer>",
		"expectedStatus <integer>",
		"url <string>",
		"tls <Object>",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("kubectl explain proxy.spec.healthCheck lacks %q:\n%s", want, out)
		}
	}

	out, stderr, err = kubectl(t, ctx, "", "explain", "px.spec.healthCheck.intervalSeconds")
	if err != nil {
		t.Fatalf("kubectl explain px.spec.healthCheck.intervalSeconds: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "intervalSeconds is the time between two probes") {
		t.Errorf("explain of intervalSeconds lacks its description:\n%s", out)
	}

	// Negative control: explain fails for a field that does not exist.
	if _, _, err := kubectl(t, ctx, "", "explain", "proxy.spec.healthCheck.noSuchField"); err == nil {
		t.Errorf("kubectl explain of a missing field succeeded")
	}
}
