package lease

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

func proxyObj(mutate func(p *crawlv1alpha1.Proxy)) *crawlv1alpha1.Proxy {
	latency := int64(42)
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "squid-1"},
		Spec:       crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Attributes: map[string]string{"region": "eu"}},
		Status: crawlv1alpha1.ProxyStatus{IP: "10.0.0.7", LatencyMillis: &latency, Conditions: []metav1.Condition{
			{Type: crawlv1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonProbeSucceeded},
		}},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func TestProxyInfoFromProxy(t *testing.T) {
	healthyEU := ProxyInfo{Namespace: "crawl", Name: "squid-1", URL: "http://10.0.0.7:3128", Host: "10.0.0.7", Port: 3128,
		Attributes: map[string]string{"region": "eu"}, LatencyMillis: 42, Healthy: true}
	tests := []struct {
		name   string
		mutate func(p *crawlv1alpha1.Proxy)
		want   func(i ProxyInfo) ProxyInfo
	}{
		{"healthy managed", nil, func(i ProxyInfo) ProxyInfo { return i }},
		{"unhealthy condition", func(p *crawlv1alpha1.Proxy) { p.Status.Conditions[0].Status = metav1.ConditionFalse },
			func(i ProxyInfo) ProxyInfo { i.Healthy = false; return i }},
		{"no condition yet", func(p *crawlv1alpha1.Proxy) { p.Status.Conditions = nil },
			func(i ProxyInfo) ProxyInfo { i.Healthy = false; return i }},
		{"being deleted", func(p *crawlv1alpha1.Proxy) { now := metav1.Now(); p.DeletionTimestamp = &now },
			func(i ProxyInfo) ProxyInfo { i.Healthy = false; return i }},
		{"no address yet", func(p *crawlv1alpha1.Proxy) { p.Status.IP = "" },
			func(i ProxyInfo) ProxyInfo { i.Healthy, i.URL, i.Host, i.Port = false, "", "", 0; return i }},
		{"no latency", func(p *crawlv1alpha1.Proxy) { p.Status.LatencyMillis = nil },
			func(i ProxyInfo) ProxyInfo { i.LatencyMillis = 0; return i }},
		{"probed at this address", func(p *crawlv1alpha1.Proxy) { p.Status.ProbedURL = "http://10.0.0.7:3128" },
			func(i ProxyInfo) ProxyInfo { return i }},
		// The verdict does not follow the proxy to another address: not
		// offered until a probe through the new one passes.
		{"probed at another address", func(p *crawlv1alpha1.Proxy) { p.Status.ProbedURL = "http://10.0.0.7:6443" },
			func(i ProxyInfo) ProxyInfo { i.Healthy = false; return i }},
		{"external endpoint moved to another port", func(p *crawlv1alpha1.Proxy) {
			p.Spec.Mode = crawlv1alpha1.ModeExternal
			p.Spec.Endpoint = &crawlv1alpha1.Endpoint{Host: "proxy.example.net", Port: 6443}
			p.Status.ProbedURL = "http://proxy.example.net:8080"
		}, func(i ProxyInfo) ProxyInfo {
			i.URL, i.Host, i.Port, i.External, i.Healthy = "http://proxy.example.net:6443", "proxy.example.net", 6443, true, false
			return i
		}},
		{"external endpoint", func(p *crawlv1alpha1.Proxy) {
			p.Spec.Mode = crawlv1alpha1.ModeExternal
			p.Spec.Endpoint = &crawlv1alpha1.Endpoint{Host: "proxy.example.net", Port: 8080}
		}, func(i ProxyInfo) ProxyInfo {
			i.URL, i.Host, i.Port, i.External = "http://proxy.example.net:8080", "proxy.example.net", 8080, true
			return i
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ProxyInfoFromProxy(proxyObj(tc.mutate))
			if diff := cmp.Diff(tc.want(healthyEU), got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// recordingFleet records the calls ProxySync makes.
type recordingFleet struct {
	calls []string
}

var _ Fleet = (*recordingFleet)(nil)

func (f *recordingFleet) UpsertProxy(p ProxyInfo) {
	f.calls = append(f.calls, "upsert "+p.Key().String()+" healthy="+map[bool]string{true: "true", false: "false"}[p.Healthy])
}
func (f *recordingFleet) RemoveProxy(k ProxyKey) { f.calls = append(f.calls, "remove "+k.String()) }

func TestProxySync(t *testing.T) {
	f := &recordingFleet{}
	h := NewProxySync(f)
	h.OnAdd(proxyObj(nil), true)
	h.OnUpdate(proxyObj(nil), proxyObj(func(p *crawlv1alpha1.Proxy) { p.Status.Conditions = nil }))
	h.OnAdd(&metav1.PartialObjectMetadata{}, false) // other types are ignored
	h.OnDelete(proxyObj(nil))
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "crawl/squid-2", Obj: proxyObj(func(p *crawlv1alpha1.Proxy) { p.Name = "squid-2" })})
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "x/y", Obj: "garbage"})
	want := []string{"upsert crawl/squid-1 healthy=true", "upsert crawl/squid-1 healthy=false", "remove crawl/squid-1", "remove crawl/squid-2"}
	if diff := cmp.Diff(want, f.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}

	// End to end with the real store: the cache events drive selection.
	s, _ := newTestStore(t, Options{})
	sync := NewProxySync(s)
	sync.OnAdd(proxyObj(nil), true)
	l := mustAcquire(t, s, AcquireRequest{Namespace: "crawl", Selector: map[string]string{"region": "eu"}})
	if l.Proxy.URL != "http://10.0.0.7:3128" {
		t.Errorf("lease proxy %+v", l.Proxy)
	}
	s.Release(l.ID)
	sync.OnDelete(proxyObj(nil))
	if _, err := s.Acquire(AcquireRequest{}); !IsNoMatch(err) {
		t.Errorf("acquire after the proxy was deleted: %v", err)
	}
}

func TestActiveLeasesCollector(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxLeasesPerProxy: 5})
	s.UpsertProxy(px("ns", "p", 1))
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewActiveLeasesCollector(s)); err != nil {
		t.Fatal(err)
	}
	expect := func(n int) {
		t.Helper()
		want := "# HELP proxy_operator_leases_active Live proxy leases in the lease store (HTTP and Kubernetes API), read at scrape time.\n" +
			"# TYPE proxy_operator_leases_active gauge\n" +
			"proxy_operator_leases_active " + map[int]string{0: "0", 2: "2", 1: "1"}[n] + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "proxy_operator_leases_active"); err != nil {
			t.Error(err)
		}
	}
	expect(0)
	a := mustAcquire(t, s, AcquireRequest{})
	mustAcquire(t, s, AcquireRequest{})
	expect(2)
	s.Release(a.ID)
	expect(1)
}
