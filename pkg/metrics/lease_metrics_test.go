package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
)

// Metrics feeds the lease path's doors without pkg/leasing knowing it.
var _ leasing.Recorder = (*metrics.Metrics)(nil)

const leaseRequestsHeader = `
# HELP proxy_operator_lease_requests_total Lease requests by API (http: POST /v1/leases, kubernetes: ProxyLease create) and outcome.
# TYPE proxy_operator_lease_requests_total counter
`

func TestLeaseRequests(t *testing.T) {
	type req struct{ api, outcome string }
	tests := []struct {
		name     string
		apis     []string // Options.LeaseAPIs
		outcomes []string // Options.LeaseOutcomes
		requests []req
		want     string // "" = no series at all
	}{
		{
			name: "every api and outcome pair is exported at 0 before any request",
			apis: leasing.APIs(), outcomes: []string{leasing.OutcomeGranted, leasing.OutcomeNoMatch},
			want: `
proxy_operator_lease_requests_total{api="http",outcome="granted"} 0
proxy_operator_lease_requests_total{api="http",outcome="no_match"} 0
proxy_operator_lease_requests_total{api="kubernetes",outcome="granted"} 0
proxy_operator_lease_requests_total{api="kubernetes",outcome="no_match"} 0
`,
		},
		{
			name: "counts per api and outcome; an unlisted outcome gets its own series",
			apis: leasing.APIs(), outcomes: []string{leasing.OutcomeGranted},
			requests: []req{{leasing.APIHTTP, leasing.OutcomeGranted}, {leasing.APIKubernetes, leasing.OutcomeGranted},
				{leasing.APIKubernetes, leasing.OutcomeGranted}, {leasing.APIHTTP, "novel"}},
			want: `
proxy_operator_lease_requests_total{api="http",outcome="granted"} 1
proxy_operator_lease_requests_total{api="http",outcome="novel"} 1
proxy_operator_lease_requests_total{api="kubernetes",outcome="granted"} 2
`,
		},
		{
			// Negative control: the zeros above come from the options,
			// not from New.
			name:     "without the options only counted pairs exist",
			requests: []req{{leasing.APIHTTP, leasing.OutcomeError}, {leasing.APIHTTP, leasing.OutcomeError}},
			want: `
proxy_operator_lease_requests_total{api="http",outcome="error"} 2
`,
		},
		{name: "nothing listed, nothing counted: no series"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := metrics.New(reg, nil, metrics.Options{LeaseAPIs: tt.apis, LeaseOutcomes: tt.outcomes})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tt.requests {
				m.LeaseRequest(r.api, r.outcome)
			}
			want := ""
			if tt.want != "" {
				want = leaseRequestsHeader + tt.want
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.LeaseRequestsName); err != nil {
				t.Error(err)
			}
		})
	}
}

// The counter is registered by New itself: a registry already holding a
// proxy_operator_lease_requests_total collector refuses it.
func TestLeaseRequestsRegisteredByNew(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metrics.LeaseRequestsName, Help: "a duplicate",
	}, []string{"api", "outcome"}))
	if _, err := metrics.New(reg, nil, metrics.Options{}); err == nil {
		t.Fatal("New registered next to another proxy_operator_lease_requests_total; want a registration error")
	}
}
