package apiserver

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	clocktesting "k8s.io/utils/clock/testing"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"
)

var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fixture is the ProxyLease storage the lean path calls, over a real store
// and wait queue on a fake clock.
type fixture struct {
	t     testing.TB
	clock *clocktesting.FakeClock
	store *lease.Store
	rest  *proxylease.REST
}

func newFixture(t testing.TB, opts lease.Options, proxies ...lease.ProxyInfo) *fixture {
	t.Helper()
	clk := clocktesting.NewFakeClock(epoch)
	store, err := lease.New(opts, clk)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		store.UpsertProxy(p)
	}
	svc, err := leasing.NewWithStore(store, leasing.DefaultOptions(), clk).Service(leasing.APIKubernetes, 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, closeREST := proxylease.NewREST(svc, clk, 64)
	t.Cleanup(closeREST)
	return &fixture{t: t, clock: clk, store: store, rest: r}
}

func proxy(ns, name string, attrs map[string]string) lease.ProxyInfo {
	return lease.ProxyInfo{
		Namespace: ns, Name: name, URL: "http://127.0.0.9:3128", Host: "127.0.0.9", Port: 3128,
		Attributes: attrs, LatencyMillis: 12, Healthy: true,
	}
}

func ctxFor(ns, userName string) context.Context {
	ctx := genericapirequest.WithNamespace(context.Background(), ns)
	return genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: userName})
}

func newLease(name string, mutate ...func(*leasingv1alpha1.ProxyLease)) *leasingv1alpha1.ProxyLease {
	pl := &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, m := range mutate {
		m(pl)
	}
	return pl
}

func (f *fixture) mustCreate(ctx context.Context, pl *leasingv1alpha1.ProxyLease) *leasingv1alpha1.ProxyLease {
	f.t.Helper()
	obj, err := f.rest.Create(ctx, pl, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create %s: %v", pl.Name, err)
	}
	return obj.(*leasingv1alpha1.ProxyLease)
}
