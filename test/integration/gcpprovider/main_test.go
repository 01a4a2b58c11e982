package gcpprovider

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/artifacts/crds"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
	"github.com/proxy-operator/proxy-operator/test/builders"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/gcefake"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

const (
	project   = "integration-project"
	namespace = "gcp"
	// quotaRetry is short for a test, long against the polls, so a quota
	// wait is told apart from a backoff loop.
	quotaRetry = 3 * time.Second
	timeout    = 90 * time.Second
)

// operatorNamespace is the operator's own (its proxy auth key's Secret).
const operatorNamespace = "default"

// shared is the environment of every test in the package; set by TestMain.
var shared *environment

type environment struct {
	cp     *controlplane.ControlPlane
	client client.Client
	fake   *gcefake.Server
	squids *gcefake.SquidBackend
	target *httptest.Server
}

func TestMain(m *testing.M) { os.Exit(framework.Main(m, "gcpprovider", start)) }

// start brings up the package's control plane, a target site, the Compute
// Engine fake with real squids behind it, and the operator in process.
func start(ctx context.Context, fw *framework.Env) error {
	if _, err := nodeagent.LookSquid(""); err != nil {
		return fmt.Errorf("%w (these tests run real squid)", err)
	}
	env := &environment{}
	shared = env
	var err error
	if env.cp, err = fw.ControlPlane(ctx, controlplane.Options{CRDFS: crds.FS}); err != nil {
		return err
	}
	scheme, err := app.NewScheme()
	if err != nil {
		return err
	}
	if env.client, err = framework.Client(env.cp, scheme); err != nil {
		return err
	}
	if err := env.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	env.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "gcp integration target; via=%s", r.Header.Get("Via"))
	}))
	fw.Defer("target", func() error { env.target.Close(); return nil })
	env.squids, err = gcefake.NewSquidBackend(gcefake.SquidOptions{
		PoolFirst: netip.MustParseAddr("127.0.7.2"), PoolLast: netip.MustParseAddr("127.0.7.254"),
	})
	if err != nil {
		return err
	}
	fw.Defer("squids", env.squids.Close)
	env.fake = gcefake.New(gcefake.Options{Backend: env.squids, PageSize: 3})
	endpoint, err := env.fake.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	fw.Defer("compute engine fake", env.fake.Close)

	opLog, err := fw.Logger("operator.log")
	if err != nil {
		return err
	}
	ctrl.SetLogger(opLog)
	opts := app.NewOptions()
	// Its proxy auth key Secret goes there; the proxies check credentials.
	opts.Namespace = operatorNamespace
	opts.MetricsAddr, opts.HealthProbeAddr = "0", "0"
	opts.Discovery.Addr = "0"
	opts.APIServer.SecureServing.BindPort = 0
	opts.Providers = []string{gcp.Name}
	opts.GCP.Project, opts.GCP.Endpoint, opts.GCP.RequestTimeout = project, endpoint, 5*time.Second
	opts.Intervals.ProvisioningPoll = 200 * time.Millisecond
	opts.Intervals.DeletionPoll = 200 * time.Millisecond
	opts.Intervals.RequeueNow = 50 * time.Millisecond
	opts.Intervals.DriftPoll = 2 * time.Second
	opts.Intervals.QuotaRetry = quotaRetry
	opts.Intervals.CreateRetry = time.Second
	opts.Health.Tick = 100 * time.Millisecond
	if err := opts.Validate(); err != nil {
		return err
	}
	return fw.Go(log.IntoContext(ctx, opLog), "operator", func(ctx context.Context) error {
		return app.Run(ctx, env.cp.RESTConfig(), opts)
	}, nil)
}

// --- helpers ---

func newProxy(name, zone, machineType string) *crawlv1alpha1.Proxy {
	return builders.Proxy(namespace, name).GCP(zone, machineType).Probe(shared.target.URL+"/", 2, 1).Obj()
}

func create(t *testing.T, p *crawlv1alpha1.Proxy) {
	t.Helper()
	if err := shared.client.Create(t.Context(), p); err != nil {
		t.Fatalf("creating proxy %s: %v", p.Name, err)
	}
	t.Cleanup(func() { deleteAndWait(t, p.Name) })
}

func get(t *testing.T, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	p := &crawlv1alpha1.Proxy{}
	if err := shared.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, p); err != nil {
		t.Fatalf("getting proxy %s: %v", name, err)
	}
	return p
}

// eventually polls cond until it holds or timeout passes; cond returns a
// description of what it saw for the failure message.
func eventually(t *testing.T, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true, func(context.Context) (bool, error) {
		ok, seen := cond()
		last = seen
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last seen: %s", what, err, last)
	}
}

func waitPhase(t *testing.T, name string, phase crawlv1alpha1.ProxyPhase) *crawlv1alpha1.Proxy {
	t.Helper()
	var p *crawlv1alpha1.Proxy
	eventually(t, fmt.Sprintf("proxy %s phase %s", name, phase), timeout, func() (bool, string) {
		p = get(t, name)
		return p.Status.Phase == phase && p.Status.ObservedGeneration == p.Generation, describe(p)
	})
	return p
}

func describe(p *crawlv1alpha1.Proxy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gen=%d observed=%d phase=%q providerID=%q ip=%q", p.Generation, p.Status.ObservedGeneration, p.Status.Phase, p.Status.ProviderID, p.Status.IP)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s/%s(%q)", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// instances are the fake's instances owned by the Proxy.
func instances(p *crawlv1alpha1.Proxy) []gcefake.InstanceInfo {
	var out []gcefake.InstanceInfo
	for _, in := range shared.fake.Instances() {
		if in.Labels[gcp.LabelOwnerUID] == string(p.UID) {
			out = append(out, in)
		}
	}
	return out
}

// inserts counts insert calls answered with code (0: any) in zone.
func inserts(zone string, code int) int {
	n := 0
	for _, c := range shared.fake.Calls() {
		if c.Op == gcefake.OpInsert && c.Zone == zone && (code == 0 || c.Code == code) {
			n++
		}
	}
	return n
}

// throughProxy fetches the target through the proxy at ip:3128.
// throughProxy proves that the VM of p forwards requests with the
// operator's credentials for p, and refuses them (407) without.
func throughProxy(t *testing.T, p *crawlv1alpha1.Proxy) {
	t.Helper()
	kube, err := kubernetes.NewForConfig(shared.cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := framework.OperatorKeyring(t.Context(), kube.CoreV1(), operatorNamespace, proxyauth.DefaultSecretName)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		proxyURL string
		want     int
	}{
		{"http://" + p.Status.IP + ":3128", http.StatusProxyAuthRequired},
		{framework.ProbeURL(keyring, p.Namespace, p.Name, "http://"+p.Status.IP+":3128"), http.StatusOK},
	} {
		proxyURL, err := url.Parse(tc.proxyURL)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 5 * time.Second}
		resp, err := c.Get(shared.target.URL + "/through")
		if err != nil {
			t.Fatalf("GET through proxy %s: %v", proxyURL.Redacted(), err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(resp.Header.Get("Via"), "squid") {
			t.Fatalf("GET through proxy %s: %s, Via %q; want %d from squid", proxyURL.Redacted(), resp.Status, resp.Header.Get("Via"), tc.want)
		}
	}
}

func events(t *testing.T, name string) []string {
	t.Helper()
	var list corev1.EventList
	if err := shared.client.List(context.Background(), &list, client.InNamespace(namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("involvedObject.name", name)}); err != nil {
		t.Fatalf("listing events: %v", err)
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Type+"/"+ev.Reason)
	}
	return out
}

func deleteAndWait(t *testing.T, name string) {
	t.Helper()
	p := &crawlv1alpha1.Proxy{}
	ctx := context.Background()
	if err := shared.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, p); err != nil {
		return
	}
	uid := p.UID
	_ = shared.client.Delete(ctx, p)
	eventually(t, "proxy "+name+" and its instance gone", timeout, func() (bool, string) {
		err := shared.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &crawlv1alpha1.Proxy{})
		left := instances(&crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{UID: uid}})
		return client.IgnoreNotFound(err) == nil && err != nil && len(left) == 0, fmt.Sprintf("get: %v, instances: %d", err, len(left))
	})
}

func instanceName(p *crawlv1alpha1.Proxy) string { return provider.NameFromUID(p.UID) }
