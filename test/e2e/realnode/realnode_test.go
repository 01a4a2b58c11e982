package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// TestREADME walks the README on the real node, each step on the last.
func TestREADME(t *testing.T) {
	c := connect(t)
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"kustomize install: two replicas Ready, APIService Available", c.installKustomize},
		{"origins: a public site and an in-cluster Service", c.origins},
		{"sample fleet: Squid pods under Pod Security restricted, Proxies Ready", c.fleet},
		{"first lease from a crawler pod, page through it, 407 without credentials, gateway by DNS", c.firstLease},
		{"artifacts/proxies: private destinations refused, probes still pass", c.networkPolicy},
		{"rollout restart and drain under lease load: none lost, none granted twice", c.restartAndDrain},
		{"uninstall (kustomize) as the README says: nothing left", c.uninstallKustomize},
		{"Helm install: two replicas Ready, APIService Available, a Proxy Ready; uninstall: nothing left", c.helm},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.FailNow()
		}
	}
}

// overlayDir is the install of the README's "overlay of your own", in the
// cluster's state directory.
func (c *cluster) overlayDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(c.dir, "e2e-install")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func splitRef(ref string) (name, tag string) {
	i := strings.LastIndex(ref, ":")
	return ref[:i], ref[i+1:]
}

func (c *cluster) installKustomize(t *testing.T) {
	dir := c.overlayDir(t)
	base, err := filepath.Rel(dir, filepath.Join(c.root, "artifacts", "install"))
	if err != nil {
		t.Fatal(err)
	}
	opName, opTag := splitRef(c.images["operator"])
	sqName, sqTag := splitRef(c.images["squid"])
	k := fmt.Sprintf("resources: [%s]\nimages:\n  - {name: proxy-operator, newName: %s, newTag: %q}\n  - {name: proxy-operator-squid, newName: %s, newTag: %q}\n",
		base, opName, opTag, sqName, sqTag)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	c.must(t, 2*time.Minute, nil, "apply", "-k", dir)
	c.waitInstalled(t)
	// The Squid image is set at install beside the operator's.
	d, err := c.kube.AppsV1().Deployments(operatorNS).Get(context.Background(), "proxy-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var squid string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "SQUID_IMAGE" {
			squid = e.Value
		}
	}
	if squid != c.images["squid"] {
		t.Errorf("SQUID_IMAGE = %q, want the install's %q", squid, c.images["squid"])
	}
}

const (
	siteMarker = "the-public-site"
	webMarker  = "the-in-cluster-origin"
)

// origins: a site on the node's public stand-in address (a host-network
// pod: the only way to hold a node address) and an in-cluster origin
// behind a Service (a private address).
func (c *cluster) origins(t *testing.T) {
	ctx := context.Background()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: originNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serve := func(name, marker, listen string, hostNetwork bool, labels map[string]string) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: originNS, Labels: labels},
			Spec: corev1.PodSpec{
				HostNetwork:                   hostNetwork,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{
					Name: "httpd", Image: c.images["toolbox"], ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", fmt.Sprintf("mkdir -p /tmp/www && echo %s > /tmp/www/index.html && exec httpd -f -p %s -h /tmp/www", marker, listen)},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(portOf(listen))}},
						PeriodSeconds: 1,
					},
				}},
			},
		}
		if hostNetwork {
			pod.Spec.Containers[0].ReadinessProbe.TCPSocket.Host = c.site
			// Port 80: root (the origin namespace is not restricted).
			pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)}
		}
		if _, err := c.kube.CoreV1().Pods(originNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	serve("site", siteMarker, fmt.Sprintf("%s:%d", c.site, sitePort), true, nil)
	serve("web", webMarker, "8080", false, map[string]string{"app": "web"})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: originNS},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := c.kube.CoreV1().Services(originNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.must(t, 2*time.Minute, nil, "-n", originNS, "wait", "pod", "--all", "--for=condition=Ready", "--timeout=2m")
}

func portOf(listen string) int32 {
	_, p, found := strings.Cut(listen, ":")
	if !found {
		p = listen
	}
	var n int32
	fmt.Sscan(p, &n)
	return n
}

func (c *cluster) siteURL() string { return fmt.Sprintf("http://%s:%d/", c.site, sitePort) }

const webURL = "http://web." + originNS + ".svc.cluster.local:8080/"

func (c *cluster) fleet(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crawlNS, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if _, err := c.kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The README's fleet, its probes aimed at the site instead of
	// example.com.
	proxies, err := os.ReadFile(filepath.Join(c.root, "artifacts", "examples", "fleet", "proxies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, doc := range strings.Split(string(proxies), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(u.Object, c.siteURL(), "spec", "healthCheck", "url"); err != nil {
			t.Fatal(err)
		}
		out, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(out))
	}
	c.must(t, time.Minute, nil, "-n", crawlNS, "apply", "-f", "artifacts/examples/fleet/cloud-init-secret.yaml")
	c.must(t, time.Minute, []byte(strings.Join(docs, "---\n")), "-n", crawlNS, "apply", "-f", "-")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := c.kubectl(ctx, nil, "-n", crawlNS, "wait", "proxy", "--all", "--for=condition=Ready", "--timeout=5m"); err != nil {
		pods, _ := c.kubectl(context.Background(), nil, "-n", crawlNS, "get", "pods,proxies,events", "-o", "wide")
		c.dumpOperator(t)
		t.Fatalf("%v\n%s\n%s", err, out, pods)
	}
	pods, err := c.kube.CoreV1().Pods(crawlNS).List(context.Background(), metav1.ListOptions{LabelSelector: "crawl.example.com/managed-by"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("%d Squid pods, want 2", len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
		squid := p.Spec.Containers[0]
		if squid.Image != c.images["squid"] {
			t.Errorf("pod %s runs %s, want the install's Squid image %s", p.Name, squid.Image, c.images["squid"])
		}
		if uid := p.Spec.SecurityContext.RunAsUser; uid == nil || *uid != 13 {
			t.Errorf("pod %s runs as %v, want 13", p.Name, uid)
		}
	}
}

// leaseScript creates the README's ProxyLease from inside a pod, with the
// pod's ServiceAccount token, over the API server's Service. A create that
// meets a handover (the leader's renewal missed under load, a standby
// labelled as its successor) is answered 503 with Retry-After until the
// successor has taken over, seconds later: kubectl (client-go) retries it
// after Retry-After, as the README's command does; curl retries only when
// asked, so it is asked to.
const leaseScript = `set -e
sa=/var/run/secrets/kubernetes.io/serviceaccount
curl -sS --retry 10 --fail-with-body --cacert $sa/ca.crt -H "Authorization: Bearer $(cat $sa/token)" \
  -H 'Content-Type: application/yaml' -X POST --data-binary @- \
  https://kubernetes.default.svc/apis/leasing.crawl.example.com/v1alpha1/namespaces/$NS/proxyleases <<EOF
$LEASE
EOF`

func (c *cluster) firstLease(t *testing.T) {
	c.must(t, time.Minute, nil, "apply", "-f", "artifacts/apiserver/examples/crawler-rbac.yaml")
	lease, err := os.ReadFile(filepath.Join(c.root, "artifacts", "apiserver", "examples", "proxylease.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	res := c.runToolbox(t, crawlNS, "crawler", "crawler", map[string]string{"NS": crawlNS, "LEASE": string(lease)}, leaseScript)
	if !res.succeeded {
		t.Fatalf("creating the ProxyLease from the crawler pod: exit %d: %s", res.exitCode, res.logs)
	}
	var pl struct {
		Metadata struct{ Name string }
		Status   struct {
			Proxy struct{ Name, URL string }
		}
	}
	if err := json.Unmarshal([]byte(res.logs), &pl); err != nil || pl.Status.Proxy.URL == "" {
		t.Fatalf("the ProxyLease's answer has no proxy URL (%v): %s", err, res.logs)
	}
	if pl.Status.Proxy.Name != "proxy-b" {
		t.Errorf("leased %s, want proxy-b (tier premium)", pl.Status.Proxy.Name)
	}
	c.leaseURL = pl.Status.Proxy.URL
	// Another user (the admin) sees the lease without its credentials and
	// may not release it: it is the crawler's.
	seen, err := c.leasing.LeasingV1alpha1().ProxyLeases(crawlNS).Get(context.Background(), pl.Metadata.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if seen.Status.Credentials != nil || seen.Status.Proxy == nil || strings.Contains(seen.Status.Proxy.URL, "@") {
		t.Errorf("another user sees the crawler's credentials: %+v, %+v", seen.Status.Credentials, seen.Status.Proxy)
	}
	if err := c.leasing.LeasingV1alpha1().ProxyLeases(crawlNS).Delete(context.Background(), pl.Metadata.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("another user's delete of the crawler's lease: %v, want 403", err)
	}
	bare, err := url.Parse(pl.Status.Proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	bare.User = nil

	// From another pod: the page through the lease, 407 without its
	// credentials, the same page through the gateway by its DNS name with
	// the pod's ServiceAccount token; and, before any NetworkPolicy, the
	// in-cluster origin (a private address) refused by the proxy itself.
	script := `sa=/var/run/secrets/kubernetes.io/serviceaccount
echo "lease: $(curl -sS --max-time 20 -x "$LEASE_URL" "$SITE")"
echo "bare: $(curl -s --max-time 20 -o /dev/null -w '%{http_code}' -x "$BARE_URL" "$SITE")"
echo "gateway: $(curl -sS --max-time 20 -x "http://crawler:$(cat $sa/token)@proxy-operator-gateway.proxy-operator-system.svc:8888" "$SITE")"
echo "web: $(curl -s --max-time 20 -o /dev/null -w '%{http_code}' -x "$LEASE_URL" "$WEB")"`
	res = c.runToolbox(t, crawlNS, "fetch", "crawler", map[string]string{
		"LEASE_URL": pl.Status.Proxy.URL, "BARE_URL": bare.String(), "SITE": c.siteURL(), "WEB": webURL,
	}, script)
	want := map[string]string{"lease": siteMarker, "bare": "407", "gateway": siteMarker, "web": "403"}
	got := lines(res.logs)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q (pod output:\n%s)", k, got[k], v, res.logs)
		}
	}
}

// lines parses "key: value" lines.
func lines(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

var proxyGVR = crawlv1alpha1.SchemeGroupVersion.WithResource("proxies")

// proxies lists the crawl namespace's Proxies.
func (c *cluster) proxies(ctx context.Context) ([]crawlv1alpha1.Proxy, error) {
	list, err := c.dyn.Resource(proxyGVR).Namespace(crawlNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]crawlv1alpha1.Proxy, len(list.Items))
	for i, u := range list.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
