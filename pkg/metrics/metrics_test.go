package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// Metrics feeds the provider metrics decorator without pkg/provider knowing it.
var _ provider.RequestRecorder = (*metrics.Metrics)(nil)

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func proxy(name string, phase crawlv1alpha1.ProxyPhase) client.Object {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Status:     crawlv1alpha1.ProxyStatus{Phase: phase},
	}
}

func TestProxiesByPhase(t *testing.T) {
	tests := []struct {
		name    string
		objects []client.Object
		want    string
	}{
		{
			name: "empty fleet reports every phase as zero",
			want: `
proxy_operator_proxies{phase="Deleting"} 0
proxy_operator_proxies{phase="Failed"} 0
proxy_operator_proxies{phase="Pending"} 0
proxy_operator_proxies{phase="Provisioning"} 0
proxy_operator_proxies{phase="Ready"} 0
proxy_operator_proxies{phase="Unhealthy"} 0
`,
		},
		{
			name: "counts by phase, unreconciled as Pending, unknown phases kept",
			objects: []client.Object{
				proxy("a", crawlv1alpha1.PhaseReady), proxy("b", crawlv1alpha1.PhaseReady),
				proxy("c", ""), proxy("d", crawlv1alpha1.PhasePending),
				proxy("e", crawlv1alpha1.PhaseFailed), proxy("f", "Hibernating"),
			},
			want: `
proxy_operator_proxies{phase="Deleting"} 0
proxy_operator_proxies{phase="Failed"} 1
proxy_operator_proxies{phase="Hibernating"} 1
proxy_operator_proxies{phase="Pending"} 2
proxy_operator_proxies{phase="Provisioning"} 0
proxy_operator_proxies{phase="Ready"} 2
proxy_operator_proxies{phase="Unhealthy"} 0
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(tt.objects...).Build()
			reg := prometheus.NewPedanticRegistry()
			if _, err := metrics.New(reg, reader, metrics.Options{}); err != nil {
				t.Fatal(err)
			}
			want := "# HELP proxy_operator_proxies Proxies by status.phase, read from the operator's cache at scrape time (an unreconciled Proxy counts as Pending).\n# TYPE proxy_operator_proxies gauge" + tt.want
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.ProxiesName); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestProxiesScrapeIsLive(t *testing.T) {
	reader := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(proxy("a", crawlv1alpha1.PhaseReady)).Build()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, reader, metrics.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := readyCount(t, reg); got != 1 {
		t.Fatalf("Ready = %v, want 1", got)
	}
	// The next scrape sees the change without anyone updating a gauge.
	if err := reader.Delete(context.Background(), proxy("a", "")); err != nil {
		t.Fatal(err)
	}
	if got := readyCount(t, reg); got != 0 {
		t.Fatalf("Ready after delete = %v, want 0", got)
	}
}

func readyCount(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.ProxiesName {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" && l.GetValue() == "Ready" {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatal("no Ready series")
	return 0
}

type failingReader struct{ client.Reader }

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("cache not synced")
}

func TestProxiesScrapeFailsOnListError(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, failingReader{}, metrics.Options{}); err != nil {
		t.Fatal(err)
	}
	_, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "cache not synced") {
		t.Fatalf("Gather error = %v, want the list error (not silent zeros)", err)
	}
}

func TestProviderRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Through the real decorator: the labels are what provider.WithMetrics emits.
	p := provider.WithMetrics("fake", stubProvider{getErr: provider.QuotaExceeded(errors.New("no"))}, m)
	_, _ = p.Get(context.Background(), "a")
	_, _ = p.Get(context.Background(), "b")
	_ = p.Delete(context.Background(), "a")

	want := `
# HELP proxy_operator_provider_requests_total Provider API calls by provider, operation (create, get, delete, list) and result (success or the error class).
# TYPE proxy_operator_provider_requests_total counter
proxy_operator_provider_requests_total{op="delete",provider="fake",result="success"} 1
proxy_operator_provider_requests_total{op="get",provider="fake",result="quota_exceeded"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.ProviderRequestsName); err != nil {
		t.Error(err)
	}
	// Without a reader there is no Proxy collector to register.
	if n, err := testutil.GatherAndCount(reg, metrics.ProxiesName); err != nil || n != 0 {
		t.Errorf("proxies series = %d (err %v), want 0 without a reader", n, err)
	}
}

func TestNewRejectsDoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, nil, metrics.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg, nil, metrics.Options{}); err == nil {
		t.Fatal("second New on the same registry succeeded; want a registration error")
	}
	if _, err := metrics.New(nil, nil, metrics.Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

type stubProvider struct {
	provider.Provider
	getErr error
}

func (s stubProvider) Get(context.Context, string) (*provider.Instance, error) { return nil, s.getErr }
func (s stubProvider) Delete(context.Context, string) error                    { return nil }

func TestPoolMetrics(t *testing.T) {
	pool := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "burst"},
		Status: crawlv1alpha1.ProxyPoolStatus{Replicas: 4, ReadyReplicas: 3, LeasedReplicas: 2, DrainingReplicas: 1,
			DesiredReplicas: 3, DesiredReason: crawlv1alpha1.DesiredDemand, WaitingRequests: 5}}
	reader := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(pool).Build()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, reader, metrics.Options{}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP proxy_operator_pool_replicas ProxyPool Proxies by state (total, ready, leased, draining), from the pool's status in the operator's cache.
# TYPE proxy_operator_pool_replicas gauge
proxy_operator_pool_replicas{namespace="ns",pool="burst",state="draining"} 1
proxy_operator_pool_replicas{namespace="ns",pool="burst",state="leased"} 2
proxy_operator_pool_replicas{namespace="ns",pool="burst",state="ready"} 3
proxy_operator_pool_replicas{namespace="ns",pool="burst",state="total"} 4
# HELP proxy_operator_pool_desired_replicas The size each ProxyPool is heading for (spec.replicas, or its autoscaling decision), by the decision's reason.
# TYPE proxy_operator_pool_desired_replicas gauge
proxy_operator_pool_desired_replicas{namespace="ns",pool="burst",reason="Demand"} 3
# HELP proxy_operator_pool_waiting_requests Lease requests waiting for a proxy each ProxyPool's template could serve (what its autoscaling grows it by).
# TYPE proxy_operator_pool_waiting_requests gauge
proxy_operator_pool_waiting_requests{namespace="ns",pool="burst"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.PoolReplicasName, metrics.PoolDesiredName, metrics.PoolWaitingName); err != nil {
		t.Error(err)
	}
}

// A standby is scraped too (both replicas are Ready): it exports no fleet
// series, so sums over the scraped pods count each Proxy and pool once.
func TestFleetSeriesOnlyWhereServing(t *testing.T) {
	pool := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	reader := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(proxy("a", crawlv1alpha1.PhaseReady), pool).Build()
	serving := false
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, reader, metrics.Options{Serving: func() bool { return serving }}); err != nil {
		t.Fatal(err)
	}
	count := func() map[string]int {
		n, err := testutil.GatherAndCount(reg, metrics.ProxiesName, metrics.PoolReplicasName)
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			per[mf.GetName()] = len(mf.GetMetric())
		}
		per["total"] = n
		return per
	}
	if got := count(); got["total"] != 0 {
		t.Errorf("standby exported fleet series: %v", got)
	}
	serving = true
	got := count()
	if got[metrics.ProxiesName] == 0 || got[metrics.PoolReplicasName] == 0 {
		t.Errorf("serving replica exported %v, want Proxy and ProxyPool series", got)
	}
	if r := readyCount(t, reg); r != 1 {
		t.Errorf("Ready = %v, want 1", r)
	}
}
