package gcp_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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
			p, err := gcp.New(context.Background(), opts, nil)
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

// TestListByTagCoversTheProxiesProjects: a provider that has created nothing
// since start (a restarted operator) still lists the VMs of every project a
// Proxy names, so the garbage collector finds their orphans; and an
// unreadable Proxy list fails the listing instead of leaving projects out.
func TestListByTagCoversTheProxiesProjects(t *testing.T) {
	fake := gcefake.New(gcefake.Options{PageSize: 1})
	url, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	created := time.Now().Add(-time.Hour)
	labels := map[string]string{gcp.LabelTag: provider.DefaultTag, gcp.LabelOwnerUID: "uid-1"}
	for _, pr := range []string{project, "team-project", "unnamed-project"} {
		if err := fake.Plant(pr, "us-central1-a", "proxy-in-"+pr, labels, created); err != nil {
			t.Fatal(err)
		}
	}
	s := runtime.NewScheme()
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	gcpProxy := func(name, project string) *crawlv1alpha1.Proxy {
		return &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: crawlv1alpha1.ProxySpec{Provider: gcp.Name,
				GCP: &crawlv1alpha1.GCPProviderSpec{Project: project, Zone: "us-central1-a", MachineType: "e2-small", Image: "i"}},
		}
	}
	reader := ctrlfake.NewClientBuilder().WithScheme(s).WithObjects(
		gcpProxy("team", "team-project"),
		gcpProxy("default", ""),
		// Another provider's Proxy names no Compute Engine project.
		&crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod"}, Spec: crawlv1alpha1.ProxySpec{Provider: "kubernetes"}},
	).Build()
	opts := gcp.DefaultOptions()
	opts.Project, opts.Endpoint, opts.RequestTimeout = project, url, 5*time.Second

	list := func(r client.Reader) ([]string, error) {
		p, err := gcp.New(t.Context(), opts, r)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Close() }()
		insts, err := p.ListByTag(t.Context(), provider.DefaultTag)
		var names []string
		for _, i := range insts {
			names = append(names, i.Name)
		}
		slices.Sort(names)
		return names, err
	}
	got, err := list(reader)
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	if diff := cmp.Diff([]string{"proxy-in-" + project, "proxy-in-team-project"}, got); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	// Negative control: without the Proxies, the team project is missed.
	if got, _ := list(nil); slices.Contains(got, "proxy-in-team-project") {
		t.Errorf("listed %v without a Proxy reader: the check above would not catch a provider ignoring the Proxies", got)
	}

	failing := interceptor.NewClient(reader, interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache not synced")
		},
	})
	got, err = list(failing)
	if !provider.IsTransient(err) || provider.IsIncompleteList(err) || len(got) != 0 {
		t.Errorf("ListByTag with the Proxies unreadable = %v, %v; want no instances and a transient (not partial) error", got, err)
	}
}
