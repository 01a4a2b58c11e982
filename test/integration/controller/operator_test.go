package controller_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/ports"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
)

// The composition root wires the real kubernetes provider, the metrics and
// the probes: a Proxy becomes a pod, the pod (made Running by the test,
// standing in for a kubelet) makes the Proxy Provisioned, /metrics shows the
// fleet and the provider calls, and deleting the Proxy deletes the pod.
//
// Not parallel: app.Run watches every namespace and registers on
// controller-runtime's global metrics registry, so it runs alone, before the
// parallel tests resume, and once per process.
func TestOperatorWiring(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(shared.Admin, client.Options{Scheme: shared.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// Cluster-wide, as the shipped ClusterRoleBinding grants it.
	const user = "proxy-operator-binary"
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: shared.ClusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := c.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), crb) })
	cfg, err := shared.CP.ClientConfigFor(user)
	if err != nil {
		t.Fatal(err)
	}

	o := app.NewOptions()
	// Its proxy auth key Secret goes there; the proxies check credentials.
	o.Namespace = "default"
	o.MetricsAddr = freeAddr(t)
	o.HealthProbeAddr = freeAddr(t)
	// Leasing is out of scope here (and its delegated authn needs rights the
	// operator role does not hold); off, so nothing binds a fixed port.
	o.Discovery.Addr = "0"
	o.APIServer.SecureServing.BindPort = 0
	o.Intervals.ProvisioningPoll = 200 * time.Millisecond
	o.Intervals.DeletionPoll = 200 * time.Millisecond
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, cfg, o) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("app.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("app.Run did not return")
		}
	})

	e := &env{t: t, c: mustWatchClient(t), ns: newNamespace(t, c)}
	e.eventually(waitTimeout, "/readyz", func() (bool, string) {
		code, body := httpGet("http://" + o.HealthProbeAddr + "/readyz")
		return code == http.StatusOK, fmt.Sprint(code, body)
	})

	p := builders.Proxy(e.ns, "pod-proxy").Provider(kubernetes.Name).Obj()
	e.create(p)
	podKey := types.NamespacedName{Namespace: e.ns, Name: provider.NameFromUID(p.UID)}
	var pod corev1.Pod
	e.eventually(waitTimeout, "pod "+podKey.String(), func() (bool, string) {
		err := c.Get(ctx, podKey, &pod)
		return err == nil, fmt.Sprint(err)
	})
	e.waitProxy("pod-proxy", "Provisioning", func(p *crawlv1alpha1.Proxy) bool {
		return p.Status.Phase == crawlv1alpha1.PhaseProvisioning && p.Status.ProviderID != ""
	})

	// Play kubelet: the pod runs at a loopback address.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "127.0.0.9"
	pod.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.9"}}
	if err := c.Status().Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	got := e.waitProvisioned("pod-proxy")
	if got.Status.IP != "127.0.0.9" {
		t.Errorf("status.ip = %q, want the pod IP", got.Status.IP)
	}
	e.waitEvent("pod-proxy", corev1.EventTypeNormal, "Created")

	_, metrics := httpGet("http://" + o.MetricsAddr + "/metrics")
	for _, want := range []string{
		`proxy_operator_proxies{phase="Provisioning"} 1`,
		`proxy_operator_provider_requests_total{op="create",provider="kubernetes",result="success"} 1`,
		`controller_runtime_reconcile_total{controller="proxy"`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	if err := c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	e.waitGone("pod-proxy")
	if err := c.Get(ctx, podKey, &pod); !apierrors.IsNotFound(err) {
		t.Errorf("pod after the Proxy is gone: %v, want NotFound", err)
	}
}

func mustWatchClient(t *testing.T) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(shared.Admin, client.Options{Scheme: shared.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "op-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := ports.One()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

func httpGet(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
