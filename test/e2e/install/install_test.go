package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/spf13/pflag"

	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

const operatorNamespace = "proxy-operator-system"

// overlays are the kustomizations a user applies.
var overlays = []string{"artifacts/install", "artifacts/install/overlays/single", "artifacts/install/overlays/production"}

type env struct {
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error

	cp      *controlplane.ControlPlane
	root    string
	kubectl string
	kube    kubernetes.Interface
	dyn     dynamic.Interface
}

func setup(t *testing.T) *env {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	// No CRDs of ours preinstalled: the install brings them. The Prometheus
	// Operator's ServiceMonitor and PodMonitor are there, as in a cluster
	// that runs it (the production overlay and the chart ship them).
	cp := controlplane.StartForTest(t, controlplane.Options{SkipCRDs: true})
	if err := controlplane.InstallCRDs(context.Background(), cp.RESTConfig(), os.DirFS("testdata")); err != nil {
		t.Fatalf("the Prometheus Operator's CRDs: %v", err)
	}
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &env{cp: cp, root: root, kubectl: filepath.Join(binDir, "kubectl"), kube: kube, dyn: dyn,
		binDir: t.TempDir()}
}

// run runs kubectl against the control plane with stdin.
func (e *env) run(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.kubectl, append([]string{"--kubeconfig", e.cp.KubeconfigPath, "--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...)...)
	cmd.Dir = e.root
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (e *env) render(t *testing.T, dir string) []byte {
	t.Helper()
	out, err := e.run(t, nil, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	return []byte(out)
}

// objects decodes a rendered stream (kustomize's or helm's).
func objects(t *testing.T, rendered []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding rendered manifest %d: %v", len(out)+1, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// TestInstall: every overlay renders and passes server-side dry-run (a
// broken manifest does not: negative control); the production overlay,
// applied, creates every object it renders; the operator run with the
// rendered Deployment's arguments as its ServiceAccount sets up its own TLS
// and token and serves the HTTP API over verified TLS.
func TestInstall(t *testing.T) {
	e := setup(t)
	// Server-side dry-run checks namespaced objects against their namespace,
	// which a dry run does not create: create it first, as the apply would.
	if out, err := e.run(t, nil, "create", "namespace", operatorNamespace); err != nil {
		t.Fatalf("creating the namespace: %v\n%s", err, out)
	}
	for _, dir := range overlays {
		t.Run("dry-run "+dir, func(t *testing.T) {
			rendered := e.render(t, dir)
			out, err := e.run(t, rendered, "apply", "--server-side", "--dry-run=server", "-f", "-")
			if err != nil {
				t.Fatalf("server-side dry-run: %v\n%s", err, out)
			}
			if got, want := strings.Count(out, "(server dry run)"), len(objects(t, rendered)); got != want {
				t.Errorf("dry run reported %d objects, the overlay renders %d:\n%s", got, want, out)
			}
		})
	}
	t.Run("dry-run refuses a broken manifest", func(t *testing.T) {
		rendered := e.render(t, "artifacts/install")
		broken := bytes.Replace(rendered, []byte("containerPort: 8090"), []byte("containerPort: 80900"), 1)
		if bytes.Equal(broken, rendered) {
			t.Fatal("the rendered install no longer has containerPort 8090; update the mutation")
		}
		if out, err := e.run(t, broken, "apply", "--server-side", "--dry-run=server", "-f", "-"); err == nil {
			t.Fatalf("a Deployment with containerPort 80900 passed the dry run:\n%s", out)
		}
	})

	rendered := e.render(t, "artifacts/install/overlays/production")
	if out, err := e.run(t, rendered, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("applying the production overlay: %v\n%s", err, out)
	}
	objs := objects(t, rendered)
	var deployment appsv1.Deployment
	t.Run("every object exists", func(t *testing.T) {
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.GetKind()]++
			gvk := o.GroupVersionKind()
			mapping, err := e.restMapping(gvk)
			if err != nil {
				t.Errorf("%s %s: %v", gvk, o.GetName(), err)
				continue
			}
			var got *unstructured.Unstructured
			if o.GetNamespace() != "" {
				got, err = e.dyn.Resource(mapping).Namespace(o.GetNamespace()).Get(context.Background(), o.GetName(), metav1.GetOptions{})
			} else {
				got, err = e.dyn.Resource(mapping).Get(context.Background(), o.GetName(), metav1.GetOptions{})
			}
			if err != nil {
				t.Errorf("%s %s/%s not created: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				continue
			}
			if got.GetLabels()["app.kubernetes.io/part-of"] != "proxy-operator" && o.GetLabels()["app.kubernetes.io/part-of"] == "proxy-operator" {
				t.Errorf("%s %s lost its part-of label", o.GetKind(), o.GetName())
			}
			if o.GetKind() == "Deployment" {
				b, _ := yaml.Marshal(o.Object)
				if err := yaml.Unmarshal(b, &deployment); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, k := range []string{"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
			"Role", "RoleBinding", "Deployment", "Service", "APIService", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor"} {
			if kinds[k] == 0 {
				t.Errorf("the production overlay renders no %s", k)
			}
		}
		if kinds["Secret"] != 0 {
			t.Errorf("the install ships %d Secrets; the operator makes its own", kinds["Secret"])
		}
	})
	if len(deployment.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("no operator Deployment in the production overlay")
	}
	t.Run("the operator sets up its own TLS and token, with the install's RBAC", func(t *testing.T) {
		e.operatorAsInstalled(t, deployment)
	})
}

// operatorAsInstalled runs the operator with the Deployment's arguments and
// checks what it made: its serving certificate, CA ConfigMap, the
// APIService's caBundle, the lease checkpoint and the token Secret.
func (e *env) operatorAsInstalled(t *testing.T, d appsv1.Deployment) {
	ctx := context.Background()
	// localhost too, so this test can verify the HTTP API it reaches on 127.0.0.1.
	o, discoveryAddr, op := e.runAsInstalled(t, d, []string{"--serving-cert-hosts=127.0.0.1"})
	// What it made, read as the admin.
	var secret *corev1.Secret
	var err error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-op.Done():
			return false, fmt.Errorf("the operator stopped: %v", op.Err())
		default:
		}
		secret, err = e.kube.CoreV1().Secrets(d.Namespace).Get(ctx, o.Certs.SecretName, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("serving certificate Secret %s: %v", o.Certs.SecretName, err)
	}
	if secret.Type != corev1.SecretTypeTLS {
		t.Errorf("serving certificate Secret type %s", secret.Type)
	}
	// The lease checkpoint is written within a second or two of the start.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := e.kube.CoreV1().Secrets(d.Namespace).Get(ctx, o.Checkpoint.SecretName, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Errorf("lease checkpoint Secret %s not written (as the ServiceAccount): %v", o.Checkpoint.SecretName, err)
	}
	cm, err := e.kube.CoreV1().ConfigMaps(d.Namespace).Get(ctx, o.Certs.CAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("CA ConfigMap: %v", err)
	}
	caPEM := []byte(cm.Data[certs.KeyCAConfigMap])
	if !bytes.Equal(caPEM, secret.Data[certs.KeyCABundle]) {
		t.Error("the CA ConfigMap differs from the Secret's bundle")
	}
	apiSvc, err := e.dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}).
		Get(ctx, o.Certs.APIService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b64, _, _ := unstructured.NestedString(apiSvc.Object, "spec", "caBundle")
	if got, _ := base64.StdEncoding.DecodeString(b64); !bytes.Equal(got, caPEM) {
		t.Errorf("APIService caBundle is not the operator's CA (%d bytes, want %d)", len(got), len(caPEM))
	}
	serving, err := certs.ParseKeyPair(secret.Data[certs.KeyServingCert], secret.Data[certs.KeyServingKey])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the CA ConfigMap holds no certificate")
	}
	apiName := o.APIServer.ServiceName + "." + d.Namespace + ".svc"
	if _, err := serving.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: apiName}); err != nil {
		t.Errorf("the serving certificate does not verify for %s, the name kube-apiserver dials: %v", apiName, err)
	}

	e.servesWithGeneratedToken(t, o, d.Namespace, discoveryAddr, roots)
}

// runAsInstalled runs the operator binary with the Deployment's arguments
// (addresses moved to free loopback ports, then extra), as the Deployment's
// ServiceAccount, until the test ends; o is those arguments parsed. A
// process of its own, as in a pod (and since one process registers the
// operator's metrics once).
func (e *env) runAsInstalled(t *testing.T, d appsv1.Deployment, extra []string) (o *app.Options, discoveryAddr string, op *framework.OperatorProcess) {
	t.Helper()
	ctx := context.Background()
	spec := d.Spec.Template.Spec
	tok, err := e.kube.CoreV1().ServiceAccounts(d.Namespace).CreateToken(ctx, spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for the operator's ServiceAccount: %v", err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := e.writeKubeconfig(kubeconfig, tok.Status.Token); err != nil {
		t.Fatal(err)
	}

	// Every server on a free port of loopback: the installed defaults (the
	// gateway's :8888 on every interface) may be taken by a test running
	// beside this one, as the real node's was in one CI run.
	ports, err := ports.Free(5)
	if err != nil {
		t.Fatal(err)
	}
	discoveryAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	args := append([]string{"--namespace=" + d.Namespace, "--leader-election-namespace=" + d.Namespace}, spec.Containers[0].Args...)
	args = append(args,
		"--discovery-bind-address="+discoveryAddr,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports[1]),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports[2]),
		"--apiserver-bind-address=127.0.0.1", "--apiserver-secure-port="+strconv.Itoa(ports[3]),
		"--gateway-bind-address=127.0.0.1:"+strconv.Itoa(ports[4]))
	args = append(args, extra...)
	o = app.NewOptions()
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the Deployment's args %v: %v", args, err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("the Deployment's args %v: %v", args, err)
	}
	logPath := filepath.Join(dir, "operator.log")
	op, err = framework.StartOperatorProcess(e.operatorBinary(t), logPath, append([]string{"--kubeconfig=" + kubeconfig}, args...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := op.Stop(30 * time.Second); err != nil {
			t.Errorf("operator: %v", err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("operator log:\n%s", logtail.Lines(string(b), 40))
			}
		}
	})
	return o, discoveryAddr, op
}

// operatorBinary is the run's operator binary, or cmd/proxy-operator built
// once per env.
func (e *env) operatorBinary(t *testing.T) string {
	t.Helper()
	e.buildOnce.Do(func() { e.binary, e.buildErr = framework.OperatorBinary(e.binDir) })
	if e.buildErr != nil {
		t.Fatal(e.buildErr)
	}
	return e.binary
}

// writeKubeconfig writes a kubeconfig of the control plane authenticated
// with token only.
func (e *env) writeKubeconfig(path, token string) error {
	cfg := e.cp.RESTConfig()
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return err
		}
	}
	return clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"cp": {Server: cfg.Host, CertificateAuthorityData: ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"operator": {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{"operator": {Cluster: "cp", AuthInfo: "operator"}},
		CurrentContext: "operator",
	}, path)
}

// servesWithGeneratedToken: the token Secret the operator generated holds
// one token, which the HTTP API (verified with roots) accepts; no token is 401.
func (e *env) servesWithGeneratedToken(t *testing.T, o *app.Options, namespace, discoveryAddr string, roots *x509.CertPool) {
	t.Helper()
	ctx := context.Background()
	var tokens discovery.Tokens
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		tokens, _, err = o.Discovery.LoadTokens(ctx, func(string) string { return "" }, e.kube.CoreV1(), namespace)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the generated token Secret: %v", err)
	}
	var token string
	for tk, identity := range tokens {
		if identity.Identity == discovery.DefaultIdentity {
			token = tk
		}
	}
	if len(tokens) != 1 || len(token) != 64 {
		t.Fatalf("the generated token Secret holds %d tokens (identity %q), want one 32-byte hex token", len(tokens), discovery.DefaultIdentity)
	}

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	get := func(token string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+discoveryAddr+"/v1/proxies", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	var code int
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		var err error
		code, err = get(token)
		// 503 not_leader until it wins the election.
		return err == nil && code != http.StatusServiceUnavailable, nil
	}); err != nil {
		t.Fatalf("HTTP API over TLS verified with the expected CA: %v", err)
	}
	if code != 200 {
		t.Errorf("GET /v1/proxies with the generated token: %d", code)
	}
	if code, err := get(""); err != nil || code != 401 {
		t.Errorf("GET /v1/proxies without a token: %d %v, want 401", code, err)
	}
}

func (e *env) restMapping(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	resources, err := e.kube.Discovery().ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	for _, r := range resources.APIResources {
		if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
			return gvk.GroupVersion().WithResource(r.Name), nil
		}
	}
	return schema.GroupVersionResource{}, fmt.Errorf("no resource of kind %s", gvk.Kind)
}
