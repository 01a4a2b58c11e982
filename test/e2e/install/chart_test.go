package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"crypto/tls"
	"crypto/x509"
	"net"
	"strconv"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
)

const chartDir = "artifacts/charts/proxy-operator"

// chartVariants pairs each values file with the kustomization it must render
// the same objects as ("" where the chart goes beyond the kustomize install).
var chartVariants = []struct {
	values    string // relative to chartDir; "" for the defaults
	kustomize string
	dryRun    bool // every kind it renders is served by the test control plane
}{
	{values: "", kustomize: "artifacts/install", dryRun: true},
	{values: "ci/single-values.yaml", kustomize: "artifacts/install/overlays/single", dryRun: true},
	{values: "ci/production-values.yaml", kustomize: "artifacts/install/overlays/production", dryRun: true},
	// cert-manager's Certificate kind is not served here.
	{values: "ci/cert-manager-values.yaml"},
}

// helm runs the pinned bin/helm in the repository root.
func (e *env) helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(e.kubectl), "helm"), args...)
	cmd.Dir = e.root
	// No user configuration, cache or plugins of the machine's.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func valuesArgs(values string) []string {
	if values == "" {
		return nil
	}
	return []string{"-f", filepath.Join(chartDir, values)}
}

func (e *env) template(t *testing.T, values string, set ...string) []byte {
	t.Helper()
	args := append([]string{"template", "proxy-operator", chartDir, "--namespace", operatorNamespace}, valuesArgs(values)...)
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := e.helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", values, err, out)
	}
	return []byte(out)
}

// chartOnly is what the chart adds to every object it renders: Helm's labels
// and the resource policy that keeps the CRDs on uninstall.
var chartOnly = struct{ labels, annotations []string }{
	labels:      []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"},
	annotations: []string{"helm.sh/resource-policy"},
}

// comparable keys objects by kind, namespace and name, with the chart's own
// labels and annotations removed. The kustomize install's Namespace is left
// out: a chart installs into the release's namespace (--create-namespace).
func comparable(objs []*unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		o = o.DeepCopy()
		strip := func(m map[string]string, keys []string) map[string]string {
			for _, k := range keys {
				delete(m, k)
			}
			return m
		}
		if l := strip(o.GetLabels(), chartOnly.labels); len(l) > 0 {
			o.SetLabels(l)
		} else {
			unstructured.RemoveNestedField(o.Object, "metadata", "labels")
		}
		if a := strip(o.GetAnnotations(), chartOnly.annotations); len(a) > 0 {
			o.SetAnnotations(a)
		} else {
			unstructured.RemoveNestedField(o.Object, "metadata", "annotations")
		}
		out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = o.Object
	}
	return out
}

// disagreement is cmp.Diff of the two installs' objects, by object.
func disagreement(kustomized, charted []*unstructured.Unstructured) string {
	k, c := comparable(kustomized), comparable(charted)
	keys := map[string]bool{}
	for key := range k {
		keys[key] = true
	}
	for key := range c {
		keys[key] = true
	}
	sorted := make([]string, 0, len(keys))
	for key := range keys {
		sorted = append(sorted, key)
	}
	sort.Strings(sorted)
	var b strings.Builder
	for _, key := range sorted {
		switch {
		case k[key] == nil:
			fmt.Fprintf(&b, "%s: only the chart renders it\n", key)
		case c[key] == nil:
			fmt.Fprintf(&b, "%s: only kustomize renders it\n", key)
		default:
			if d := cmp.Diff(k[key], c[key]); d != "" {
				fmt.Fprintf(&b, "%s (-kustomize +chart):\n%s", key, d)
			}
		}
	}
	return b.String()
}

// TestChart: the Helm chart lints (and refuses bad values with a message
// naming them), renders the same objects as the kustomize install for the
// defaults and each overlay (a drifted copy is caught: negative control),
// passes a server-side dry run, and its Deployment's arguments are flags the
// operator accepts in every variant.
func TestChart(t *testing.T) {
	e := setup(t)
	if out, err := e.run(t, nil, "create", "namespace", operatorNamespace); err != nil {
		t.Fatalf("creating the namespace: %v\n%s", err, out)
	}

	t.Run("lint", func(t *testing.T) {
		for _, v := range chartVariants {
			if out, err := e.helm(t, append([]string{"lint", "--strict", chartDir}, valuesArgs(v.values)...)...); err != nil {
				t.Errorf("helm lint --strict %s: %v\n%s", v.values, err, out)
			}
		}
	})

	t.Run("bad values are refused by name", func(t *testing.T) {
		for _, tc := range []struct {
			set  []string
			want string
		}{
			{set: []string{"replicas=3"}, want: "additional properties 'replicas' not allowed"},
			{set: []string{"replicaCount=0"}, want: "/replicaCount"},
			{set: []string{"tls.mode=bogus"}, want: "/tls/mode"},
			{set: []string{"tls.mode=certManager"}, want: "tls.certManager.issuerRef.name is required"},
			{set: []string{"tls.mode=secret", "tls.caBundle=Zm9v"}, want: "tls.existingSecret is required"},
			{set: []string{"tls.mode=secret", "tls.existingSecret=mine"}, want: "tls.caBundle is required"},
			{set: []string{"providers={aws}"}, want: "/providers/0"},
			{set: []string{"extraArgs={leader-elect}"}, want: "/extraArgs/0"},
			{set: []string{"metrics.service.enabled=false", "metrics.serviceMonitor.enabled=true"}, want: "needs metrics.service.enabled"},
		} {
			args := []string{"template", "proxy-operator", chartDir, "--namespace", operatorNamespace}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := e.helm(t, args...)
			if err == nil {
				t.Errorf("--set %v rendered; want an error", tc.set)
				continue
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("--set %v: error does not say %q:\n%s", tc.set, tc.want, out)
			}
		}
	})

	for _, v := range chartVariants {
		if v.kustomize == "" {
			continue
		}
		t.Run("agrees with "+v.kustomize, func(t *testing.T) {
			if d := disagreement(objects(t, e.render(t, v.kustomize)), objects(t, e.template(t, v.values))); d != "" {
				t.Errorf("helm template %s and kubectl kustomize %s disagree:\n%s", v.values, v.kustomize, d)
			}
		})
	}

	t.Run("a drifted chart is caught", func(t *testing.T) {
		kustomized := objects(t, e.render(t, "artifacts/install"))
		for _, mutate := range []struct {
			name string
			f    func(o *unstructured.Unstructured) bool
		}{
			{"a rule the generated ClusterRole lacks", func(o *unstructured.Unstructured) bool {
				if o.GetKind() != "ClusterRole" || o.GetName() != "proxy-operator" {
					return false
				}
				rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
				rules = append(rules, map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"list"}})
				_ = unstructured.SetNestedSlice(o.Object, rules, "rules")
				return true
			}},
			{"a flag of the Deployment", func(o *unstructured.Unstructured) bool {
				if o.GetKind() != "Deployment" {
					return false
				}
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				c := containers[0].(map[string]any)
				c["args"] = append(c["args"].([]any), "--lease-queue-max=1")
				_ = unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers")
				return true
			}},
			{"a CRD's schema", func(o *unstructured.Unstructured) bool {
				if o.GetKind() != "CustomResourceDefinition" {
					return false
				}
				_ = unstructured.SetNestedField(o.Object, "Proxie", "spec", "names", "kind")
				return true
			}},
		} {
			charted := objects(t, e.template(t, ""))
			mutated := false
			for _, o := range charted {
				if mutate.f(o) {
					mutated = true
					break
				}
			}
			if !mutated {
				t.Fatalf("%s: nothing to mutate in the chart's render", mutate.name)
			}
			if d := disagreement(kustomized, charted); d == "" {
				t.Errorf("%s: the comparison found no difference", mutate.name)
			}
		}
	})

	for _, v := range chartVariants {
		if !v.dryRun {
			continue
		}
		t.Run("dry-run "+v.kustomize, func(t *testing.T) {
			rendered := e.template(t, v.values)
			out, err := e.run(t, rendered, "apply", "--server-side", "--dry-run=server", "-f", "-")
			if err != nil {
				t.Fatalf("server-side dry-run of the chart with %q: %v\n%s", v.values, err, out)
			}
			if got, want := strings.Count(out, "(server dry run)"), len(objects(t, rendered)); got != want {
				t.Errorf("dry run reported %d objects, the chart renders %d:\n%s", got, want, out)
			}
		})
	}

	for _, v := range chartVariants {
		t.Run("operator accepts the arguments of "+valuesName(v.values), func(t *testing.T) {
			d := deploymentOf(t, objects(t, e.template(t, v.values)))
			o := app.NewOptions()
			fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
			o.AddFlags(fs)
			// In a pod the namespace is the pod's.
			args := append([]string{"--namespace=" + operatorNamespace}, d.Spec.Template.Spec.Containers[0].Args...)
			if err := fs.Parse(args); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if err := o.Validate(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		})
	}

	t.Run("certManager mode mounts the Certificate's Secret", func(t *testing.T) {
		objs := objects(t, e.template(t, "ci/cert-manager-values.yaml"))
		d := deploymentOf(t, objs)
		var cert, apiService *unstructured.Unstructured
		for _, o := range objs {
			switch o.GetKind() {
			case "Certificate":
				cert = o
			case "APIService":
				apiService = o
			}
		}
		if cert == nil || apiService == nil {
			t.Fatalf("certManager values render no Certificate (%v) or APIService (%v)", cert != nil, apiService != nil)
		}
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		vols := d.Spec.Template.Spec.Volumes
		if len(vols) != 1 || vols[0].Secret == nil || vols[0].Secret.SecretName != secretName {
			t.Errorf("the Deployment mounts %+v, want the Certificate's Secret %s", vols, secretName)
		}
		if got, want := apiService.GetAnnotations()["cert-manager.io/inject-ca-from"], operatorNamespace+"/"+cert.GetName(); got != want {
			t.Errorf("APIService inject-ca-from %q, want %q", got, want)
		}
		dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		for _, want := range []string{"proxy-lease-api." + operatorNamespace + ".svc", "proxy-operator-discovery." + operatorNamespace + ".svc"} {
			if !slices.Contains(dns, want) {
				t.Errorf("the Certificate names %v, not %s (the name kube-apiserver or crawlers dial)", dns, want)
			}
		}
		args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		if strings.Contains(args, "--serving-cert-secret=") {
			t.Errorf("certManager mode still has the operator issue its own certificate: %s", args)
		}
	})

	// Last: it installs the chart for real (all but the Certificate, whose
	// kind is not served here) and runs the operator from its Deployment.
	t.Run("certManager mode: the operator serves the mounted certificate", func(t *testing.T) {
		e.servesMountedCertificate(t, objects(t, e.template(t, "ci/cert-manager-values.yaml")))
	})
}

// servesMountedCertificate applies the objects, writes a certificate as
// cert-manager would into a directory standing in for the mounted Secret, and
// runs the operator with the Deployment's arguments: both lease APIs serve
// that certificate, and the operator issues none of its own.
func (e *env) servesMountedCertificate(t *testing.T, objs []*unstructured.Unstructured) {
	ctx := context.Background()
	var manifest bytes.Buffer
	for _, o := range objs {
		if o.GetKind() == "Certificate" {
			continue
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		manifest.WriteString("---\n")
		manifest.Write(b)
	}
	if out, err := e.run(t, manifest.Bytes(), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("applying the chart: %v\n%s", err, out)
	}
	d := deploymentOf(t, objs)
	mount := d.Spec.Template.Spec.Containers[0].VolumeMounts[0].MountPath

	now := time.Now()
	ca, err := certs.NewCA("cert-manager test CA", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	apiName := "proxy-lease-api." + operatorNamespace + ".svc"
	serving, err := ca.Issue([]string{apiName, "proxy-operator-discovery." + operatorNamespace + ".svc", "127.0.0.1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM, "ca.crt": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := &d.Spec.Template.Spec.Containers[0]
	for i, a := range c.Args {
		c.Args[i] = strings.ReplaceAll(a, mount, dir)
	}
	o, discoveryAddr, _ := e.runAsInstalled(t, d, nil)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	e.servesWithGeneratedToken(t, o, operatorNamespace, discoveryAddr, roots)

	// The aggregated API serves it too, under the name kube-apiserver dials.
	apiAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(o.APIServer.SecureServing.BindPort))
	var conn *tls.Conn
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		conn, err = tls.Dial("tcp", apiAddr, &tls.Config{RootCAs: roots, ServerName: apiName})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the ProxyLease API at %s does not serve the mounted certificate for %s: %v", apiAddr, apiName, err)
	}
	_ = conn.Close()

	if _, err := e.kube.CoreV1().Secrets(operatorNamespace).Get(ctx, "proxy-operator-serving-cert", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the operator made its own serving certificate Secret (err %v); cert-manager's is the one", err)
	}
	apiSvc, err := e.dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}).
		Get(ctx, "v1alpha1.leasing.crawl.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _, _ := unstructured.NestedString(apiSvc.Object, "spec", "caBundle"); b != "" {
		t.Error("the operator wrote the APIService's caBundle; cert-manager's CA injector owns it in this mode")
	}
}

func valuesName(values string) string {
	if values == "" {
		return "the defaults"
	}
	return values
}

func deploymentOf(t *testing.T, objs []*unstructured.Unstructured) appsv1.Deployment {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		b, err := yaml.Marshal(o.Object)
		if err == nil {
			err = yaml.Unmarshal(b, &d)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("the Deployment runs %d containers", len(d.Spec.Template.Spec.Containers))
		}
		return d
	}
	t.Fatal("no Deployment rendered")
	return appsv1.Deployment{}
}
