package kubernetes

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// apiFaults injects the next error per verb into a fake client and counts
// the calls that reach it.
type apiFaults struct {
	mu    sync.Mutex
	next  map[string]error
	calls map[string]int
}

func (f *apiFaults) inject(verb string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next[verb] = err
}

func (f *apiFaults) take(verb string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[verb]++
	err := f.next[verb]
	delete(f.next, verb)
	return err
}

func (f *apiFaults) count(verb string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[verb]
}

func newTestProvider(t *testing.T, opts Options, objs ...client.Object) (*Provider, client.Client, *apiFaults) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	faults := &apiFaults{next: map[string]error{}, calls: map[string]int{}}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := faults.take("create"); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := faults.take("get"); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := faults.take("delete"); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := faults.take("list"); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
	})
	p, err := New(c, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, base, faults
}

func request(name, uid, tag, namespace string) provider.CreateRequest {
	return provider.CreateRequest{Name: name, OwnerUID: types.UID("uid-" + uid), Tag: tag, Namespace: namespace}
}

var podsGR = schema.GroupResource{Resource: "pods"}

func TestNewRejectsBadOptions(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	tests := []struct {
		name string
		c    client.Client
		opts Options
	}{
		{"nil client", nil, Options{}},
		{"namespace not a DNS label", c, Options{Namespace: "Team_A"}},
		{"node name not a DNS subdomain", c, Options{NodeName: "node a"}},
	}
	for _, tc := range tests {
		if p, err := New(tc.c, tc.opts); err == nil {
			t.Errorf("New with %s = %v, want an error", tc.name, p)
		}
	}
	if _, err := New(c, Options{Namespace: "team", NodeName: "node-a.example"}); err != nil {
		t.Errorf("New with valid options: %v", err)
	}
}

func TestCreate(t *testing.T) {
	ctx := context.Background()
	p, c, _ := newTestProvider(t, Options{NodeName: "local"})
	req := request("proxy-aaa", "1", "fleet", "team")
	req.CloudInit = "#cloud-config\n"
	id, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if id != "k8s://team/proxy-aaa" {
		t.Errorf("providerID = %q, want k8s://team/proxy-aaa", id)
	}
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "proxy-aaa"}, &pod); err != nil {
		t.Fatalf("reading the created pod: %v", err)
	}
	want, err := buildPod(req, p.opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Labels, pod.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Spec, pod.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

func TestCreateExistingNameIsSuccessAndUntouched(t *testing.T) {
	ctx := context.Background()
	p, c, _ := newTestProvider(t, Options{})
	first := request("proxy-aaa", "1", "fleet", "team")
	id1, err := p.Create(ctx, first)
	if err != nil {
		t.Fatalf("first Create: %v", err)
	}
	var before corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "proxy-aaa"}, &before); err != nil {
		t.Fatal(err)
	}
	other := request("proxy-aaa", "2", "other-fleet", "team")
	other.CloudInit = "changed"
	id2, err := p.Create(ctx, other)
	if err != nil {
		t.Fatalf("Create of an existing name: %v, want success", err)
	}
	if id1 != id2 {
		t.Errorf("providerIDs %q and %q differ", id1, id2)
	}
	var after corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "proxy-aaa"}, &after); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("existing pod modified (-before +after):\n%s", diff)
	}
}

func TestCreateErrors(t *testing.T) {
	tests := []struct {
		name      string
		req       provider.CreateRequest
		opts      Options
		inject    error
		wantClass error
		wantCalls int
	}{
		{"invalid name, no API call", request("Bad_Name", "1", "fleet", "team"), Options{}, nil, provider.ErrPermanent, 0},
		{"missing owner, no API call", provider.CreateRequest{Name: "proxy-a", Tag: "t", Namespace: "team"}, Options{}, nil, provider.ErrPermanent, 0},
		{"no namespace anywhere", request("proxy-a", "1", "fleet", ""), Options{}, nil, provider.ErrPermanent, 0},
		{"403 forbidden", request("proxy-a", "1", "fleet", "team"), Options{},
			apierrors.NewForbidden(podsGR, "proxy-a", errors.New("exceeded quota")), provider.ErrPermanent, 1},
		{"422 invalid", request("proxy-a", "1", "fleet", "team"), Options{},
			apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "proxy-a", nil), provider.ErrPermanent, 1},
		{"429", request("proxy-a", "1", "fleet", "team"), Options{}, apierrors.NewTooManyRequests("busy", 1), provider.ErrTransient, 1},
		{"500", request("proxy-a", "1", "fleet", "team"), Options{}, apierrors.NewInternalError(errors.New("x")), provider.ErrTransient, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _, faults := newTestProvider(t, tc.opts)
			if tc.inject != nil {
				faults.inject("create", tc.inject)
			}
			id, err := p.Create(context.Background(), tc.req)
			if provider.Class(err) != tc.wantClass {
				t.Errorf("Create = (%q, %v), want class %v", id, err, tc.wantClass)
			}
			if id != "" {
				t.Errorf("failed Create returned providerID %q", id)
			}
			if got := faults.count("create"); got != tc.wantCalls {
				t.Errorf("API create calls = %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestCreateUsesProviderNamespaceOverProxys(t *testing.T) {
	p, c, _ := newTestProvider(t, Options{Namespace: "proxies"})
	id, err := p.Create(context.Background(), request("proxy-a", "1", "fleet", "team"))
	if err != nil || id != "k8s://proxies/proxy-a" {
		t.Fatalf("Create = (%q, %v), want k8s://proxies/proxy-a", id, err)
	}
	var pod corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "proxies", Name: "proxy-a"}, &pod); err != nil {
		t.Errorf("pod not in the provider's namespace: %v", err)
	}
}

func TestGet(t *testing.T) {
	created := metav1.Now()
	running := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy-run", Namespace: "team", CreationTimestamp: created,
			Labels: map[string]string{provider.TagLabel: "fleet", provider.OwnerUIDLabel: "uid-1"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.7"},
	}
	p, _, faults := newTestProvider(t, Options{}, running)
	ctx := context.Background()

	inst, err := p.Get(ctx, "k8s://team/proxy-run")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if inst.State != provider.StateRunning || inst.IP != "127.0.0.7" || inst.OwnerUID != "uid-1" || inst.Tag != "fleet" {
		t.Errorf("Get = %+v, want Running at 127.0.0.7 owned by uid-1 tagged fleet", inst)
	}

	tests := []struct {
		name      string
		id        string
		inject    error
		wantClass error
		wantCalls int
	}{
		{"missing pod", "k8s://team/proxy-gone", nil, provider.ErrNotFound, 1},
		{"foreign providerID, no API call", "zones/z/instances/proxy-run", nil, provider.ErrNotFound, 0},
		{"malformed providerID, no API call", "k8s://team", nil, provider.ErrNotFound, 0},
		{"500", "k8s://team/proxy-run", apierrors.NewInternalError(errors.New("x")), provider.ErrTransient, 1},
		{"403", "k8s://team/proxy-run", apierrors.NewForbidden(podsGR, "proxy-run", errors.New("no")), provider.ErrPermanent, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := faults.count("get")
			if tc.inject != nil {
				faults.inject("get", tc.inject)
			}
			inst, err := p.Get(ctx, tc.id)
			if provider.Class(err) != tc.wantClass || inst != nil {
				t.Errorf("Get(%q) = (%+v, %v), want nil and class %v", tc.id, inst, err, tc.wantClass)
			}
			if got := faults.count("get") - before; got != tc.wantCalls {
				t.Errorf("API get calls = %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	existing := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "proxy-a", Namespace: "team"}}
	p, c, faults := newTestProvider(t, Options{}, existing)
	ctx := context.Background()

	if err := p.Delete(ctx, "k8s://team/proxy-a"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "proxy-a"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod after Delete: %v, want NotFound", err)
	}
	for _, id := range []string{"k8s://team/proxy-a", "k8s://team/never", "zones/z/instances/x"} {
		if err := p.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%q) of a missing instance: %v, want nil", id, err)
		}
	}
	faults.inject("delete", apierrors.NewForbidden(podsGR, "proxy-b", errors.New("no")))
	if err := p.Delete(ctx, "k8s://team/proxy-b"); !provider.IsPermanent(err) {
		t.Errorf("Delete with a 403: %v, want ErrPermanent", err)
	}
	faults.inject("delete", apierrors.NewServiceUnavailable("later"))
	if err := p.Delete(ctx, "k8s://team/proxy-b"); !provider.IsTransient(err) {
		t.Errorf("Delete with a 503: %v, want ErrTransient", err)
	}
}

func TestListByTag(t *testing.T) {
	pod := func(ns, name, tag string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.Now(),
			Labels: map[string]string{provider.TagLabel: tag, provider.OwnerUIDLabel: "uid-" + name}}}
	}
	objs := []client.Object{
		pod("team", "proxy-a", "fleet"),
		pod("other", "proxy-b", "fleet"),
		pod("team", "proxy-c", "another"),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled", Namespace: "team"}},
	}
	ids := func(insts []provider.Instance) []string {
		var out []string
		for _, i := range insts {
			out = append(out, i.ProviderID+" owner="+string(i.OwnerUID))
		}
		sort.Strings(out)
		return out
	}
	tests := []struct {
		name string
		opts Options
		tag  string
		want []string
	}{
		{"all namespaces", Options{}, "fleet", []string{"k8s://other/proxy-b owner=uid-proxy-b", "k8s://team/proxy-a owner=uid-proxy-a"}},
		{"only the provider's namespace", Options{Namespace: "team"}, "fleet", []string{"k8s://team/proxy-a owner=uid-proxy-a"}},
		{"other tag", Options{}, "another", []string{"k8s://team/proxy-c owner=uid-proxy-c"}},
		{"unused tag", Options{}, "nobody", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _, _ := newTestProvider(t, tc.opts, objs...)
			insts, err := p.ListByTag(context.Background(), tc.tag)
			if err != nil {
				t.Fatalf("ListByTag: %v", err)
			}
			if insts == nil {
				t.Error("ListByTag returned a nil slice, want an empty one")
			}
			if diff := cmp.Diff(tc.want, ids(insts)); diff != "" {
				t.Errorf("ListByTag(%q) (-want +got):\n%s", tc.tag, diff)
			}
		})
	}
	t.Run("API error is classified", func(t *testing.T) {
		p, _, faults := newTestProvider(t, Options{}, objs...)
		faults.inject("list", apierrors.NewTimeoutError("slow", 1))
		if insts, err := p.ListByTag(context.Background(), "fleet"); !provider.IsTransient(err) || insts != nil {
			t.Errorf("ListByTag with a timeout = (%v, %v), want nil and ErrTransient", insts, err)
		}
	})
}
