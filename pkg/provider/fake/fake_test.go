package fake_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
	"github.com/proxy-operator/proxy-operator/pkg/provider/providertest"
)

func harness(opts ...fake.Option) providertest.Harness {
	return providertest.Harness{
		New:       func(providertest.T) provider.Provider { return fake.New(opts...) },
		MissingID: fake.ProviderID,
		Timeout:   5 * time.Second,
		Interval:  time.Millisecond,
	}
}

func TestContract(t *testing.T) {
	providertest.Run(t, harness())
}

func TestContractSlowTransitions(t *testing.T) {
	providertest.Run(t, harness(fake.WithGetsUntilRunning(5), fake.WithGetsUntilGone(3)))
}

// --- negative controls: broken variants of the fake must fail the suite ---

// broken wraps the fake and overrides single methods.
type broken struct {
	*fake.Provider
	create func(ctx context.Context, req provider.CreateRequest) (string, error)
	get    func(ctx context.Context, id string) (*provider.Instance, error)
	delete func(ctx context.Context, id string) error
	list   func(ctx context.Context, tag string) ([]provider.Instance, error)
}

func (b *broken) Create(ctx context.Context, req provider.CreateRequest) (string, error) {
	if b.create != nil {
		return b.create(ctx, req)
	}
	return b.Provider.Create(ctx, req)
}

func (b *broken) Get(ctx context.Context, id string) (*provider.Instance, error) {
	if b.get != nil {
		return b.get(ctx, id)
	}
	return b.Provider.Get(ctx, id)
}

func (b *broken) Delete(ctx context.Context, id string) error {
	if b.delete != nil {
		return b.delete(ctx, id)
	}
	return b.Provider.Delete(ctx, id)
}

func (b *broken) ListByTag(ctx context.Context, tag string) ([]provider.Instance, error) {
	if b.list != nil {
		return b.list(ctx, tag)
	}
	return b.Provider.ListByTag(ctx, tag)
}

func TestContractNegativeControls(t *testing.T) {
	tests := []struct {
		name    string
		opts    []fake.Option
		breakIt func(b *broken)
		// wantFailed must all fail; other cases may fail too.
		wantFailed []string
	}{
		{
			name: "create not idempotent",
			breakIt: func(b *broken) {
				var mu sync.Mutex
				seen := map[string]int{}
				b.create = func(ctx context.Context, req provider.CreateRequest) (string, error) {
					mu.Lock()
					seen[req.Name]++
					n := seen[req.Name]
					mu.Unlock()
					if n > 1 {
						req.Name = fmt.Sprintf("%s-%d", req.Name, n)
					}
					return b.Provider.Create(ctx, req)
				}
			},
			wantFailed: []string{providertest.CaseCreateIsIdempotent},
		},
		{
			name: "create modifies the existing instance",
			breakIt: func(b *broken) {
				b.create = func(ctx context.Context, req provider.CreateRequest) (string, error) {
					id := fake.ProviderID(req.Name)
					if _, ok := b.Provider.Instance(id); ok {
						b.Provider.Remove(id)
					}
					return b.Provider.Create(ctx, req)
				}
			},
			wantFailed: []string{providertest.CaseCreateIsIdempotent},
		},
		{
			name: "create accepts invalid requests",
			breakIt: func(b *broken) {
				b.create = func(ctx context.Context, req provider.CreateRequest) (string, error) {
					if req.Validate() != nil {
						req.Name, req.OwnerUID = "accepted-anyway", "someone"
					}
					return b.Provider.Create(ctx, req)
				}
			},
			wantFailed: []string{providertest.CaseCreateRejectsInvalidRequest},
		},
		{
			name: "get of missing is transient",
			breakIt: func(b *broken) {
				b.get = func(ctx context.Context, id string) (*provider.Instance, error) {
					inst, err := b.Provider.Get(ctx, id)
					if provider.IsNotFound(err) {
						return nil, provider.Transient(err)
					}
					return inst, err
				}
			},
			wantFailed: []string{providertest.CaseGetMissingIsNotFound, providertest.CaseDeleteThenGetNotFound},
		},
		{
			name: "get returns unclassified errors",
			breakIt: func(b *broken) {
				b.get = func(ctx context.Context, id string) (*provider.Instance, error) {
					inst, err := b.Provider.Get(ctx, id)
					if err != nil {
						return nil, errors.New("instance " + id + " does not exist")
					}
					return inst, nil
				}
			},
			wantFailed: []string{providertest.CaseGetMissingIsNotFound},
		},
		{
			name: "get returns another instance's ID",
			breakIt: func(b *broken) {
				b.get = func(ctx context.Context, id string) (*provider.Instance, error) {
					inst, err := b.Provider.Get(ctx, id)
					if inst != nil {
						inst.ProviderID = "fake://someone-else"
					}
					return inst, err
				}
			},
			wantFailed: []string{providertest.CaseCreateThenGet},
		},
		{
			name: "delete of missing is not found",
			breakIt: func(b *broken) {
				b.delete = func(ctx context.Context, id string) error {
					if _, ok := b.Provider.Instance(id); !ok {
						return provider.NotFound(fmt.Errorf("%s", id))
					}
					return b.Provider.Delete(ctx, id)
				}
			},
			wantFailed: []string{providertest.CaseDeleteMissingSucceeds, providertest.CaseDeleteThenGetNotFound},
		},
		{
			name: "delete does nothing",
			breakIt: func(b *broken) {
				b.delete = func(context.Context, string) error { return nil }
			},
			wantFailed: []string{providertest.CaseDeleteThenGetNotFound},
		},
		{
			name: "list ignores the tag",
			breakIt: func(b *broken) {
				b.list = func(context.Context, string) ([]provider.Instance, error) { return b.Provider.Instances(), nil }
			},
			wantFailed: []string{providertest.CaseListByTagFiltersByTag},
		},
		{
			name: "list drops the owner UID",
			breakIt: func(b *broken) {
				b.list = func(ctx context.Context, tag string) ([]provider.Instance, error) {
					insts, err := b.Provider.ListByTag(ctx, tag)
					for i := range insts {
						insts[i].OwnerUID = ""
					}
					return insts, err
				}
			},
			wantFailed: []string{providertest.CaseListByTagCarriesOwner},
		},
		{
			name: "list fails on an unused tag",
			breakIt: func(b *broken) {
				b.list = func(ctx context.Context, tag string) ([]provider.Instance, error) {
					insts, err := b.Provider.ListByTag(ctx, tag)
					if err == nil && len(insts) == 0 {
						return nil, provider.NotFound(errors.New("no such label"))
					}
					return insts, err
				}
			},
			wantFailed: []string{providertest.CaseListByTagFiltersByTag},
		},
		{
			name:       "never becomes running",
			opts:       []fake.Option{fake.WithGetsUntilRunning(-1)},
			wantFailed: []string{providertest.CaseReachesRunning},
		},
		{
			name: "running without an IP",
			breakIt: func(b *broken) {
				b.get = func(ctx context.Context, id string) (*provider.Instance, error) {
					inst, err := b.Provider.Get(ctx, id)
					if inst != nil {
						inst.IP = ""
					}
					return inst, err
				}
			},
			wantFailed: []string{providertest.CaseReachesRunning},
		},
		{
			name:       "zero CreatedAt",
			opts:       []fake.Option{fake.WithClock(clocktesting.NewFakePassiveClock(time.Time{}))},
			wantFailed: []string{providertest.CaseCreateThenGet, providertest.CaseListByTagCarriesOwner},
		},
		{
			name: "unknown state",
			breakIt: func(b *broken) {
				b.get = func(ctx context.Context, id string) (*provider.Instance, error) {
					inst, err := b.Provider.Get(ctx, id)
					if inst != nil {
						inst.State = "STAGING"
					}
					return inst, err
				}
			},
			wantFailed: []string{providertest.CaseCreateThenGet},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := providertest.Harness{
				New: func(providertest.T) provider.Provider {
					b := &broken{Provider: fake.New(tc.opts...)}
					if tc.breakIt != nil {
						tc.breakIt(b)
					}
					return b
				},
				MissingID: fake.ProviderID,
				Timeout:   200 * time.Millisecond,
				Interval:  time.Millisecond,
			}
			failures := providertest.Check(h)
			failed := providertest.Failed(failures)
			for _, want := range tc.wantFailed {
				if !slices.Contains(failed, want) {
					t.Errorf("case %s passed against a provider whose %s; failed cases: %v", want, tc.name, failed)
				}
			}
			for _, f := range failures {
				t.Logf("%s: %s", f.Case, strings.Join(f.Messages, "; "))
			}
		})
	}
}

// TestCheckPassesTheFake is the positive side of the negative controls: Check
// reports nothing for a correct provider, so a reported failure above is the
// breakage and not the recorder.
func TestCheckPassesTheFake(t *testing.T) {
	if failures := providertest.Check(harness()); len(failures) != 0 {
		t.Errorf("Check(fake) = %+v, want no failures", failures)
	}
}

// --- the fake's own behaviour ---

func req(name string) provider.CreateRequest {
	return provider.CreateRequest{Name: name, Tag: "t", OwnerUID: types.UID("uid-" + name)}
}

func TestStateTransitions(t *testing.T) {
	tests := []struct {
		name       string
		opts       []fake.Option
		wantStates []provider.InstanceState // of successive Gets
	}{
		{"default: one Get provisioning", nil,
			[]provider.InstanceState{provider.StateProvisioning, provider.StateRunning, provider.StateRunning}},
		{"running at once", []fake.Option{fake.WithGetsUntilRunning(0)},
			[]provider.InstanceState{provider.StateRunning, provider.StateRunning}},
		{"three Gets provisioning", []fake.Option{fake.WithGetsUntilRunning(3)},
			[]provider.InstanceState{provider.StateProvisioning, provider.StateProvisioning, provider.StateProvisioning, provider.StateRunning}},
		{"manual", []fake.Option{fake.WithGetsUntilRunning(-1)},
			[]provider.InstanceState{provider.StateProvisioning, provider.StateProvisioning, provider.StateProvisioning}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New(tc.opts...)
			id, err := f.Create(t.Context(), req("proxy-a"))
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			var got []provider.InstanceState
			for range tc.wantStates {
				inst, err := f.Get(t.Context(), id)
				if err != nil {
					t.Fatalf("Get: %v", err)
				}
				got = append(got, inst.State)
				if (inst.State == provider.StateRunning) != (inst.IP != "") {
					t.Errorf("state %s with IP %q: Running must come with an IP, and only Running", inst.State, inst.IP)
				}
			}
			if diff := cmp.Diff(tc.wantStates, got); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeleteLingersForGetsUntilGone(t *testing.T) {
	f := fake.New(fake.WithGetsUntilGone(2))
	id, _ := f.Create(t.Context(), req("proxy-a"))
	if err := f.Delete(t.Context(), id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	// While it lingers, Create of the same name is "already exists".
	if again, err := f.Create(t.Context(), req("proxy-a")); err != nil || again != id {
		t.Errorf("Create while terminating = (%q, %v), want (%q, nil)", again, err, id)
	}
	if l, _ := f.ListByTag(t.Context(), "t"); len(l) != 1 || l[0].State != provider.StateTerminated {
		t.Errorf("ListByTag while terminating = %+v, want the Terminated instance", l)
	}
	var got []string
	for range 3 {
		inst, err := f.Get(t.Context(), id)
		switch {
		case provider.IsNotFound(err):
			got = append(got, "NotFound")
		case err != nil:
			t.Fatalf("Get: %v", err)
		default:
			got = append(got, string(inst.State))
		}
	}
	if diff := cmp.Diff([]string{"Terminated", "Terminated", "NotFound"}, got); diff != "" {
		t.Errorf("Gets after Delete (-want +got):\n%s", diff)
	}
	if l, _ := f.ListByTag(t.Context(), "t"); len(l) != 0 {
		t.Errorf("ListByTag after gone = %+v, want none", l)
	}
}

func TestInjectErrorQueue(t *testing.T) {
	f := fake.New()
	e1 := provider.QuotaExceeded(errors.New("first"))
	e2 := provider.Transient(errors.New("third"))
	f.InjectError(provider.OpCreate, e1)
	f.InjectError(provider.OpCreate, nil) // second call runs normally
	f.InjectError(provider.OpCreate, e2)

	var got []error
	for _, name := range []string{"proxy-a", "proxy-b", "proxy-c", "proxy-d"} {
		_, err := f.Create(t.Context(), req(name))
		got = append(got, err)
	}
	want := []error{e1, nil, e2, nil}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("Create results (-want +got):\n%s", diff)
	}
	// A failed call has no effect.
	wantNames := []string{"proxy-b", "proxy-d"}
	var names []string
	for _, i := range f.Instances() {
		names = append(names, i.Name)
	}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
	// Injection is per op.
	f.InjectError(provider.OpList, e1)
	if _, err := f.Get(t.Context(), fake.ProviderID("proxy-b")); err != nil {
		t.Errorf("Get after injecting into list = %v, want nil", err)
	}
	if _, err := f.ListByTag(t.Context(), "t"); err != e1 {
		t.Errorf("ListByTag = %v, want the injected %v", err, e1)
	}
}

func TestInjectErrorUnknownOpPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("InjectError(\"insert\", …) did not panic")
		}
	}()
	fake.New().InjectError("insert", errors.New("x"))
}

func TestCallsAreRecorded(t *testing.T) {
	f := fake.New()
	spec := &crawlv1alpha1.ProxySpec{Provider: "fake"}
	r := req("proxy-a")
	r.Proxy = spec
	r.CloudInit = "#cloud-config"
	ctx := t.Context()
	id, _ := f.Create(ctx, r)
	f.InjectError(provider.OpGet, provider.Transient(errors.New("blip")))
	_, getErr := f.Get(ctx, id)
	_ = f.Delete(ctx, id)
	_, _ = f.ListByTag(ctx, "t")
	spec.Provider = "mutated after the call"

	want := []fake.Call{
		{Op: "create", Request: func() provider.CreateRequest {
			w := r
			w.Proxy = &crawlv1alpha1.ProxySpec{Provider: "fake"}
			return w
		}(), ProviderID: id},
		{Op: "get", ProviderID: id, Err: getErr},
		{Op: "delete", ProviderID: id},
		{Op: "list", Tag: "t"},
	}
	if diff := cmp.Diff(want, f.Calls(), cmpopts.EquateErrors()); diff != "" {
		t.Errorf("Calls() (-want +got):\n%s", diff)
	}
	if got := f.CallsOf(provider.OpGet); len(got) != 1 || got[0].Err == nil {
		t.Errorf("CallsOf(get) = %+v, want the one failed get", got)
	}
	f.ResetCalls()
	if got := f.Calls(); len(got) != 0 {
		t.Errorf("Calls() after ResetCalls = %+v", got)
	}
}

func TestSetStateSetIPRemove(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f := fake.New(fake.WithClock(clocktesting.NewFakePassiveClock(now)))
	id, _ := f.Create(t.Context(), req("proxy-a"))

	if err := f.SetState(id, provider.StateRunning); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	if err := f.SetIP(id, "127.0.0.9"); err != nil {
		t.Fatalf("SetIP: %v", err)
	}
	inst, err := f.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := provider.Instance{ProviderID: id, Name: "proxy-a", Tag: "t", OwnerUID: req("proxy-a").OwnerUID,
		State: provider.StateRunning, IP: "127.0.0.9", CreatedAt: now}
	if diff := cmp.Diff(want, *inst); diff != "" {
		t.Errorf("instance (-want +got):\n%s", diff)
	}
	// A set state sticks: no automatic transition overrides it.
	_ = f.SetState(id, provider.StateStopped)
	if inst, _ := f.Get(t.Context(), id); inst.State != provider.StateStopped {
		t.Errorf("state after SetState(Stopped) and a Get = %s", inst.State)
	}
	if err := f.SetState(id, "Rebooting"); !provider.IsPermanent(err) {
		t.Errorf("SetState(unknown) = %v, want a permanent error", err)
	}
	if err := f.SetState("fake://nope", provider.StateRunning); !provider.IsNotFound(err) {
		t.Errorf("SetState(missing) = %v, want NotFound", err)
	}
	if !f.Remove(id) {
		t.Errorf("Remove(existing) = false")
	}
	if _, err := f.Get(t.Context(), id); !provider.IsNotFound(err) {
		t.Errorf("Get after Remove = %v, want NotFound", err)
	}
	if f.Remove(id) {
		t.Errorf("Remove(missing) = true")
	}
}

func TestDistinctIPs(t *testing.T) {
	f := fake.New(fake.WithGetsUntilRunning(0))
	seen := map[string]bool{}
	for i := range 600 {
		id, err := f.Create(t.Context(), req(fmt.Sprintf("proxy-%d", i)))
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		inst, _ := f.Instance(id)
		if seen[inst.IP] {
			t.Fatalf("IP %s handed out twice", inst.IP)
		}
		seen[inst.IP] = true
	}
}

func TestPlantAndUnreachable(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	old := now.Add(-time.Hour)
	f := fake.New(fake.WithClock(clocktesting.NewFakePassiveClock(now)))
	unlabelled := f.Plant(provider.Instance{Name: "stray", Tag: "t", Scope: "zone-a", CreatedAt: old})
	eu := f.Plant(provider.Instance{Name: "proxy-eu", Tag: "t", OwnerUID: "uid-eu", Scope: "zone-b"})
	f.Plant(provider.Instance{Name: "other-tag", Tag: "other", Scope: "zone-a"})

	inst, ok := f.Instance(unlabelled)
	if !ok {
		t.Fatalf("planted instance %s missing", unlabelled)
	}
	if inst.ProviderID != fake.ProviderID("stray") || !inst.CreatedAt.Equal(old) || inst.OwnerUID != "" ||
		inst.State != provider.StateRunning || inst.IP == "" {
		t.Errorf("planted instance = %+v, want it as planted, Running with an IP", inst)
	}
	if inst, _ := f.Instance(eu); !inst.CreatedAt.Equal(now) {
		t.Errorf("planted without CreatedAt: %v, want the clock's now %v", inst.CreatedAt, now)
	}

	names := func(insts []provider.Instance) []string {
		var out []string
		for _, i := range insts {
			out = append(out, i.Name)
		}
		return out
	}
	got, err := f.ListByTag(t.Context(), "t")
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	if diff := cmp.Diff([]string{"proxy-eu", "stray"}, names(got)); diff != "" {
		t.Errorf("ListByTag (-want +got):\n%s", diff)
	}

	f.SetUnreachable("zone-b", true)
	got, err = f.ListByTag(t.Context(), "t")
	scopes, incomplete := provider.UnreachableScopes(err)
	if !incomplete || !provider.IsTransient(err) {
		t.Fatalf("ListByTag with zone-b unreachable: err = %v, want a transient incomplete listing", err)
	}
	if diff := cmp.Diff([]string{"zone-b"}, scopes); diff != "" {
		t.Errorf("unreachable scopes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"stray"}, names(got)); diff != "" {
		t.Errorf("ListByTag with zone-b unreachable (-want +got):\n%s", diff)
	}

	f.SetUnreachable("zone-b", false)
	if got, err := f.ListByTag(t.Context(), "t"); err != nil || len(got) != 2 {
		t.Errorf("ListByTag after zone-b is back = %v, %v; want both instances, no error", names(got), err)
	}
}
