package gcp_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
			opts.AllowedProjects = []string{"other-project"} // the second scope below
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

// TestProviderActsOnlyInItsProjects (#26 item 6): ListByTag covers
// --gcp-project and --gcp-allowed-projects (a restarted operator finds the
// orphans there) and nothing else, whatever a Proxy names; a Create in
// another project fails permanently naming the flag; Get answers not found
// and Delete deletes nothing there. On the code before, a Proxy naming
// another team's project brought its VMs into the listing, and the garbage
// collector deleted them.
func TestProviderActsOnlyInItsProjects(t *testing.T) {
	fake := gcefake.New(gcefake.Options{PageSize: 1})
	url, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	created := time.Now().Add(-time.Hour)
	labels := map[string]string{gcp.LabelTag: provider.DefaultTag, gcp.LabelOwnerUID: "uid-1"}
	for _, pr := range []string{project, "team-project", "other-team-project"} {
		if err := fake.Plant(pr, "us-central1-a", "proxy-in-"+pr, labels, created); err != nil {
			t.Fatal(err)
		}
	}
	opts := gcp.DefaultOptions()
	opts.Project, opts.Endpoint, opts.RequestTimeout = project, url, 5*time.Second
	opts.AllowedProjects = []string{"team-project"}
	p, err := gcp.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ctx := t.Context()

	insts, err := p.ListByTag(ctx, provider.DefaultTag)
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	var names []string
	for _, i := range insts {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"proxy-in-" + project, "proxy-in-team-project"}, names); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}

	spec := func(project string) *crawlv1alpha1.ProxySpec {
		return &crawlv1alpha1.ProxySpec{Provider: gcp.Name,
			GCP: &crawlv1alpha1.GCPProviderSpec{Project: project, Zone: "us-central1-a", MachineType: "e2-small", Image: "i"}}
	}
	req := provider.CreateRequest{Name: "proxy-new", Tag: provider.DefaultTag, OwnerUID: "uid-2", Namespace: "ns", Proxy: spec("other-team-project")}
	if _, err := p.Create(ctx, req); !provider.IsPermanent(err) || !strings.Contains(err.Error(), "--gcp-allowed-projects") {
		t.Errorf("Create in a project not allowed: %v, want a permanent error naming --gcp-allowed-projects", err)
	}
	req.Proxy = spec("team-project")
	if _, err := p.Create(ctx, req); err != nil {
		t.Errorf("Create in an allowed project: %v", err)
	}

	foreign := "projects/other-team-project/zones/us-central1-a/instances/proxy-in-other-team-project"
	if _, err := p.Get(ctx, foreign); !provider.IsNotFound(err) {
		t.Errorf("Get of a VM in a project not allowed: %v, want not found", err)
	}
	if err := p.Delete(ctx, foreign); err != nil {
		t.Errorf("Delete of a VM in a project not allowed: %v, want nil (nothing of ours)", err)
	}
	if !slices.ContainsFunc(fake.Instances(), func(i gcefake.InstanceInfo) bool { return i.Project == "other-team-project" }) {
		t.Error("the VM of a project not allowed was deleted")
	}
}
