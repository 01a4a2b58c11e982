package provider_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
)

type request struct{ Provider, Op, Result string }

// recordingRecorder is the fake RequestRecorder.
type recordingRecorder struct {
	mu   sync.Mutex
	reqs []request
}

var _ provider.RequestRecorder = (*recordingRecorder)(nil)

func (r *recordingRecorder) ProviderRequest(p, op, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, request{p, op, result})
}

func (r *recordingRecorder) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.reqs...)
}

func TestWithMetrics(t *testing.T) {
	validReq := provider.CreateRequest{Name: "proxy-a", Tag: provider.DefaultTag, OwnerUID: "uid-a"}
	existing := fake.ProviderID("proxy-a")

	tests := []struct {
		name   string
		inject error // injected into the op's next call
		call   func(ctx context.Context, p provider.Provider) error
		op     string
		want   string
	}{
		{name: "create success", op: provider.OpCreate, want: "success",
			call: func(ctx context.Context, p provider.Provider) error {
				_, err := p.Create(ctx, provider.CreateRequest{Name: "proxy-b", Tag: "t", OwnerUID: "u"})
				return err
			}},
		{name: "create quota", op: provider.OpCreate, want: "quota_exceeded", inject: provider.QuotaExceeded(errors.New("CPUS")),
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.Create(ctx, validReq); return err }},
		{name: "create invalid is permanent", op: provider.OpCreate, want: "permanent",
			call: func(ctx context.Context, p provider.Provider) error {
				_, err := p.Create(ctx, provider.CreateRequest{})
				return err
			}},
		{name: "get success", op: provider.OpGet, want: "success",
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.Get(ctx, existing); return err }},
		{name: "get missing", op: provider.OpGet, want: "not_found",
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.Get(ctx, "fake://nope"); return err }},
		{name: "get unclassified is transient", op: provider.OpGet, want: "transient", inject: errors.New("connection reset"),
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.Get(ctx, existing); return err }},
		{name: "get wrapped sentinel", op: provider.OpGet, want: "permanent", inject: fmt.Errorf("403: %w", provider.ErrPermanent),
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.Get(ctx, existing); return err }},
		{name: "delete existing", op: provider.OpDelete, want: "success",
			call: func(ctx context.Context, p provider.Provider) error { return p.Delete(ctx, existing) }},
		{name: "delete missing is success", op: provider.OpDelete, want: "success",
			call: func(ctx context.Context, p provider.Provider) error { return p.Delete(ctx, "fake://nope") }},
		{name: "delete transient", op: provider.OpDelete, want: "transient", inject: provider.Transient(errors.New("503")),
			call: func(ctx context.Context, p provider.Provider) error { return p.Delete(ctx, existing) }},
		{name: "list success", op: provider.OpList, want: "success",
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.ListByTag(ctx, "t"); return err }},
		{name: "list quota", op: provider.OpList, want: "quota_exceeded", inject: provider.QuotaExceeded(nil),
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.ListByTag(ctx, "t"); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New()
			if _, err := f.Create(t.Context(), validReq); err != nil {
				t.Fatalf("seeding the fake: %v", err)
			}
			if tc.inject != nil {
				f.InjectError(tc.op, tc.inject)
			}
			rec := &recordingRecorder{}
			p := provider.WithMetrics("gcp", f, rec)

			err := tc.call(t.Context(), p)

			if diff := cmp.Diff([]request{{"gcp", tc.op, tc.want}}, rec.requests()); diff != "" {
				t.Errorf("recorded (-want +got):\n%s", diff)
			}
			// The decorator passes the error through untouched.
			if tc.inject != nil && !errors.Is(err, tc.inject) {
				t.Errorf("returned error %v, want the injected %v", err, tc.inject)
			}
			if (tc.want == "success") != (err == nil) {
				t.Errorf("returned error %v for result %q", err, tc.want)
			}
		})
	}
}

func TestWithMetricsPassesResultsThrough(t *testing.T) {
	f := fake.New(fake.WithGetsUntilRunning(0))
	rec := &recordingRecorder{}
	p := provider.WithMetrics("kubernetes", f, rec)
	req := provider.CreateRequest{Name: "proxy-a", Tag: "t", OwnerUID: "u"}

	id, err := p.Create(t.Context(), req)
	if err != nil || id != fake.ProviderID("proxy-a") {
		t.Fatalf("Create = (%q, %v), want (%q, nil)", id, err, fake.ProviderID("proxy-a"))
	}
	inst, err := p.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want, _ := f.Instance(id)
	if diff := cmp.Diff(want, *inst); diff != "" {
		t.Errorf("Get through the decorator (-fake +decorated):\n%s", diff)
	}
	list, err := p.ListByTag(t.Context(), "t")
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	if diff := cmp.Diff([]provider.Instance{want}, list); diff != "" {
		t.Errorf("ListByTag through the decorator (-fake +decorated):\n%s", diff)
	}
	if got := len(f.Calls()); got != 3 {
		t.Errorf("fake saw %d calls, want 3 (one per decorated call)", got)
	}
}

func TestWithMetricsNilRecorderIsIdentity(t *testing.T) {
	f := fake.New()
	if p := provider.WithMetrics("x", f, nil); p != provider.Provider(f) {
		t.Errorf("WithMetrics with nil recorder = %T, want the provider itself", p)
	}
}

func TestMetricsWrapperInRegistry(t *testing.T) {
	rec := &recordingRecorder{}
	r, err := provider.NewRegistry(t.Context(), []string{"kubernetes"}, map[string]provider.Constructor{
		"kubernetes": func(context.Context) (provider.Provider, error) { return fake.New(), nil },
	}, provider.MetricsWrapper(rec))
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	p, _ := r.Get("kubernetes")
	if _, err := p.Get(t.Context(), "fake://missing"); !provider.IsNotFound(err) {
		t.Fatalf("Get of missing = %v, want NotFound", err)
	}
	if diff := cmp.Diff([]request{{"kubernetes", "get", "not_found"}}, rec.requests()); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff)
	}
}
