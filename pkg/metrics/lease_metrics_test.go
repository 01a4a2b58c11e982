package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
)

// Metrics feeds the discovery handlers without pkg/discovery knowing it.
var _ discovery.LeaseMetrics = (*metrics.Metrics)(nil)

// discoveryOutcomes is what the composition root passes as LeaseOutcomes.
func discoveryOutcomes() []string {
	return []string{discovery.OutcomeGranted, discovery.OutcomeNoMatch, discovery.OutcomeBadRequest,
		discovery.OutcomeRejected, discovery.OutcomeCancelled, discovery.OutcomeError}
}

const leaseRequestsHeader = `
# HELP lease_requests_total POST /v1/leases requests of the HTTP discovery API by outcome.
# TYPE lease_requests_total counter
`

func TestLeaseRequests(t *testing.T) {
	tests := []struct {
		name     string
		outcomes []string // Options.LeaseOutcomes
		requests []string // LeaseRequest calls
		want     string   // "" = no series at all
	}{
		{
			name:     "every known outcome is exported at 0 before any request",
			outcomes: discoveryOutcomes(),
			want: `
lease_requests_total{outcome="bad_request"} 0
lease_requests_total{outcome="cancelled"} 0
lease_requests_total{outcome="error"} 0
lease_requests_total{outcome="granted"} 0
lease_requests_total{outcome="no_match"} 0
lease_requests_total{outcome="rejected"} 0
`,
		},
		{
			name:     "counts per outcome, an unlisted outcome gets its own series",
			outcomes: discoveryOutcomes(),
			requests: []string{discovery.OutcomeGranted, discovery.OutcomeGranted, discovery.OutcomeNoMatch,
				discovery.OutcomeRejected, discovery.OutcomeCancelled, discovery.OutcomeGranted, "novel"},
			want: `
lease_requests_total{outcome="bad_request"} 0
lease_requests_total{outcome="cancelled"} 1
lease_requests_total{outcome="error"} 0
lease_requests_total{outcome="granted"} 3
lease_requests_total{outcome="no_match"} 1
lease_requests_total{outcome="novel"} 1
lease_requests_total{outcome="rejected"} 1
`,
		},
		{
			// Negative control: the zeros above come from LeaseOutcomes,
			// not from New.
			name:     "without LeaseOutcomes only counted outcomes exist",
			requests: []string{discovery.OutcomeError, discovery.OutcomeBadRequest, discovery.OutcomeError},
			want: `
lease_requests_total{outcome="bad_request"} 1
lease_requests_total{outcome="error"} 2
`,
		},
		{
			name: "nothing listed, nothing counted: no series",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := metrics.New(reg, nil, metrics.Options{LeaseOutcomes: tt.outcomes})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range tt.requests {
				m.LeaseRequest(o)
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
// lease_requests_total collector refuses it.
func TestLeaseRequestsRegisteredByNew(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metrics.LeaseRequestsName, Help: "a duplicate",
	}, []string{"outcome"}))
	if _, err := metrics.New(reg, nil, metrics.Options{}); err == nil {
		t.Fatal("New registered next to another lease_requests_total; want a registration error")
	}
}
