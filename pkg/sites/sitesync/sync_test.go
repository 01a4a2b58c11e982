package sitesync

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// fakeStore records the policies it was given and answers the conflicts
// and statuses set on it.
type fakeStore struct {
	calls     [][]string
	conflicts map[string]string
	statuses  []sites.Status
}

var _ Store = (*fakeStore)(nil)

func (f *fakeStore) SetSitePolicies(ps []sites.Policy) map[string]string {
	var names []string
	for _, p := range ps {
		names = append(names, p.Name+"="+strings.Join(p.Sites, ","))
	}
	slices.Sort(names)
	f.calls = append(f.calls, names)
	return f.conflicts
}

func (f *fakeStore) SiteStatuses() []sites.Status { return f.statuses }

func sitePolicy(name string, sitesList ...string) *crawlv1alpha1.SitePolicy {
	return &crawlv1alpha1.SitePolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 2},
		Spec: crawlv1alpha1.SitePolicySpec{Sites: sitesList, MaxConcurrency: 8, MinConcurrency: 2,
			MaxGrantsPerSecond: ptr.To[int32](3), IncreaseIntervalSeconds: 7, DecreasePercent: 60,
			MinProxyIntervalMillis: 1500, HigherTiers: []crawlv1alpha1.SiteTier{{MaxConcurrency: 2}, {MaxConcurrency: 0}}}}
}

// TestSync: every event hands the store every policy known; a deletion,
// even as a tombstone, takes its policy out; conflicts are kept per policy.
func TestSync(t *testing.T) {
	st := &fakeStore{conflicts: map[string]string{"b": "taken"}}
	s := NewSync(st)
	s.OnAdd(sitePolicy("a", "a.example"), true)
	s.OnAdd(sitePolicy("b", "b.example"), true)
	s.OnUpdate(nil, sitePolicy("a", "a.example", "*.a.example"))
	s.OnDelete(toolscache.DeletedFinalStateUnknown{Obj: sitePolicy("b", "b.example")})
	s.OnAdd(&crawlv1alpha1.Proxy{}, true) // not a SitePolicy: ignored
	want := [][]string{{"a=a.example"}, {"a=a.example", "b=b.example"}, {"a=a.example,*.a.example", "b=b.example"}, {"a=a.example,*.a.example"}}
	if d := cmp.Diff(want, st.calls); d != "" {
		t.Errorf("policies handed to the store (-want +got):\n%s", d)
	}
	if got := s.Conflict("b"); got != "taken" {
		t.Errorf("conflict of b %q", got)
	}
}

// TestFromSitePolicy: the spec's fields, and the defaults where unset.
func TestFromSitePolicy(t *testing.T) {
	got := sites.FromSitePolicy(sitePolicy("a", "a.example"))
	want := sites.Policy{Name: "a", Sites: []string{"a.example"}, MaxConcurrency: 8, MinConcurrency: 2, MaxGrantsPerSecond: 3,
		IncreaseInterval: 7 * time.Second, DecreaseFactor: 0.6, ProxyInterval: 1500 * time.Millisecond, HigherTiers: []int{2, 0}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	bare := &crawlv1alpha1.SitePolicy{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: crawlv1alpha1.SitePolicySpec{Sites: []string{"b.example"}, MaxConcurrency: 4}}
	got = sites.FromSitePolicy(bare)
	want = sites.Policy{Name: "b", Sites: []string{"b.example"}, MaxConcurrency: 4, MinConcurrency: 1,
		IncreaseInterval: sites.DefaultIncreaseInterval, DecreaseFactor: sites.DefaultDecreaseFactor}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}

// TestDesiredStatus: the budget's figures, and Applied by the store's
// conflict.
func TestDesiredStatus(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	budget := sites.Status{Policy: "a", Limit: 5, Live: 3, Rate: 12.5, RefusedShare: 0.126, Cuts: 2, Tier: 1, TierLive: []int{1, 2}}
	for _, tc := range []struct {
		conflict               string
		wantStatus, wantReason string
	}{
		{"", "True", crawlv1alpha1.ReasonApplied},
		{`site "a.example" is already SitePolicy "0"'s`, "False", crawlv1alpha1.ReasonSiteTaken},
		{`site policy "a": minConcurrency 0: want at least 1`, "False", crawlv1alpha1.ReasonInvalid},
	} {
		got := desired(sitePolicy("a", "a.example"), budget, tc.conflict, now)
		want := crawlv1alpha1.SitePolicyStatus{Limit: 5, Live: 3, GrantsPerSecond: resource.NewMilliQuantity(12500, resource.DecimalSI), RateLimitedPercent: 13, Cuts: 2, Tier: 1, TierLive: []int32{1, 2}, ObservedGeneration: 2,
			Conditions: []metav1.Condition{{Type: crawlv1alpha1.ConditionApplied, Status: metav1.ConditionStatus(tc.wantStatus),
				Reason: tc.wantReason, ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(now)}}}
		if d := cmp.Diff(want, got, cmpopts.IgnoreFields(metav1.Condition{}, "Message")); d != "" {
			t.Errorf("conflict %q (-want +got):\n%s", tc.conflict, d)
		}
		if tc.conflict != "" && !strings.Contains(got.Conditions[0].Message, tc.conflict) {
			t.Errorf("the condition's message %q does not say %q", got.Conditions[0].Message, tc.conflict)
		}
	}
}

// TestCollector exports one series of each figure per policy.
func TestCollector(t *testing.T) {
	c := NewCollector(&fakeStore{statuses: []sites.Status{
		{Policy: "a", Limit: 5, Live: 3, Rate: 12.5, RefusedShare: 0.25, Cuts: 2, Tier: 1, TierLive: []int{1, 2}},
		{Policy: "b", Limit: 1},
	}})
	want := `
# HELP proxy_operator_site_limit Leases the sites of a SitePolicy may have live now (adapted between its minConcurrency and maxConcurrency).
# TYPE proxy_operator_site_limit gauge
proxy_operator_site_limit{policy="a"} 5
proxy_operator_site_limit{policy="b"} 1
# HELP proxy_operator_site_leases_live Leases for the sites of a SitePolicy live now.
# TYPE proxy_operator_site_leases_live gauge
proxy_operator_site_leases_live{policy="a"} 3
proxy_operator_site_leases_live{policy="b"} 0
# HELP proxy_operator_site_grants_per_second_limit New leases a second the sites of a SitePolicy may take now (adapted; 0 while unbounded).
# TYPE proxy_operator_site_grants_per_second_limit gauge
proxy_operator_site_grants_per_second_limit{policy="a"} 12.5
proxy_operator_site_grants_per_second_limit{policy="b"} 0
# HELP proxy_operator_site_rate_limited_ratio Share of a SitePolicy's leases over the last 30-60 s reported rate_limited or banned.
# TYPE proxy_operator_site_rate_limited_ratio gauge
proxy_operator_site_rate_limited_ratio{policy="a"} 0.25
proxy_operator_site_rate_limited_ratio{policy="b"} 0
# HELP proxy_operator_site_limit_cuts_total Cuts of a SitePolicy's limit on rate_limited or banned reports.
# TYPE proxy_operator_site_limit_cuts_total counter
proxy_operator_site_limit_cuts_total{policy="a"} 2
proxy_operator_site_limit_cuts_total{policy="b"} 0
# HELP proxy_operator_site_tier The ladder's tier of the newest lease for the sites of a SitePolicy (0: its request's first selector).
# TYPE proxy_operator_site_tier gauge
proxy_operator_site_tier{policy="a"} 1
proxy_operator_site_tier{policy="b"} 0
# HELP proxy_operator_site_tier_leases_live Leases for the sites of a SitePolicy live now on each tier of a ladder (for policies with higher tiers in use or bounded).
# TYPE proxy_operator_site_tier_leases_live gauge
proxy_operator_site_tier_leases_live{policy="a",tier="0"} 1
proxy_operator_site_tier_leases_live{policy="a",tier="1"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
