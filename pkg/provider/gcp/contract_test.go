package gcp_test

import (
	"context"
	"testing"
	"time"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/pkg/provider/providertest"
	"github.com/proxy-operator/proxy-operator/test/gcefake"
)

const project = "contract-project"

func template(project, zone string) provider.CreateRequest {
	return provider.CreateRequest{
		Namespace: "default",
		Proxy: &crawlv1alpha1.ProxySpec{Provider: gcp.Name, GCP: &crawlv1alpha1.GCPProviderSpec{
			Project: project, Zone: zone, MachineType: "e2-small",
			Image: "projects/debian-cloud/global/images/family/debian-12",
		}},
	}
}

// harness runs each case against its own fake with pages of one item, so
// every listing crosses pages; wrap may break the provider (negative
// controls).
func harness(wrap func(provider.Provider) provider.Provider) providertest.Harness {
	var fake *gcefake.Server
	return providertest.Harness{
		New: func(t providertest.T) provider.Provider {
			fake = gcefake.New(gcefake.Options{PageSize: 1})
			url, err := fake.Start("127.0.0.1:0")
			if err != nil {
				t.Fatalf("starting the fake: %v", err)
			}
			t.Cleanup(func() { _ = fake.Close() })
			opts := gcp.DefaultOptions()
			opts.Project, opts.Endpoint, opts.RequestTimeout = project, url, 5*time.Second
			p, err := gcp.New(context.Background(), opts)
			if err != nil {
				t.Fatalf("gcp.New: %v", err)
			}
			t.Cleanup(func() { _ = p.Close() })
			if wrap != nil {
				return wrap(p)
			}
			return p
		},
		Template: template("", "us-central1-a"),
		Scopes: []provider.CreateRequest{
			template("", "us-central1-a"),
			template("", "europe-west1-b"),
			template("other-project", "us-central1-b"),
		},
		MakeUnreachable: func(providertest.T) (string, func()) {
			fake.SetUnreachable(project, "us-central1-a", true)
			return "projects/" + project + "/zones/us-central1-a", func() { fake.SetUnreachable(project, "us-central1-a", false) }
		},
		MissingID: func(name string) string { return "zones/us-central1-a/instances/" + name },
		Timeout:   10 * time.Second,
		Interval:  10 * time.Millisecond,
	}
}

func TestContract(t *testing.T) {
	providertest.Run(t, harness(nil))
}

// hideIncomplete turns an incomplete listing into a complete-looking one: what
// a provider that ignored unreachables would do.
type hideIncomplete struct{ provider.Provider }

func (h hideIncomplete) ListByTag(ctx context.Context, tag string) ([]provider.Instance, error) {
	insts, err := h.Provider.ListByTag(ctx, tag)
	if provider.IsIncompleteList(err) {
		return insts, nil
	}
	return insts, err
}

// firstPageOnly lists what one page would hold: a provider that stopped at
// the first nextPageToken.
type firstPageOnly struct{ provider.Provider }

func (f firstPageOnly) ListByTag(ctx context.Context, tag string) ([]provider.Instance, error) {
	insts, err := f.Provider.ListByTag(ctx, tag)
	if len(insts) > 1 {
		insts = insts[:1]
	}
	return insts, err
}

// TestContractNegativeControls: the suite's listing cases catch a provider
// that hides unreachable zones or reads one page.
func TestContractNegativeControls(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(provider.Provider) provider.Provider
		want string
	}{
		{"hides unreachable zones", func(p provider.Provider) provider.Provider { return hideIncomplete{p} }, providertest.CaseListByTagReportsUnreachable},
		{"reads one page", func(p provider.Provider) provider.Provider { return firstPageOnly{p} }, providertest.CaseListByTagAcrossScopes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed := providertest.Failed(providertest.Check(harness(tc.wrap)))
			found := false
			for _, f := range failed {
				found = found || f == tc.want
			}
			if !found {
				t.Errorf("broken provider (%s) failed %v, want %s among them", tc.name, failed, tc.want)
			}
		})
	}
}
