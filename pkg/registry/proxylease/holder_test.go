package proxylease

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Only the holder renews, reports on or releases its lease: another user
// that RBAC lets update, report and delete ProxyLeases gets 403 (dry runs
// too) and the lease is unchanged; a collection delete leaves others'
// leases alone. The control: the holder's own requests succeed.
func TestOnlyTheHolderActsOnALease(t *testing.T) {
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 10}, proxy("ns", "px", nil))
	alice := ctxFor("ns", "alice")
	mine := f.mustCreate(alice, newLease("mine"))
	before, _ := f.store.Get(mine.Status.LeaseID)
	renew := func(ctx, name string, dryRun bool) error {
		opts := &metav1.UpdateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, _, err := f.rest.Update(ctxFor("ns", ctx), name, rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			pl := old.(*leasingv1alpha1.ProxyLease).DeepCopy()
			pl.Spec.TTLSeconds = ptr.To[int32](120)
			return pl, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, opts)
		return err
	}
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"renew", func() error { return renew("mallory", "mine", false) }},
		{"dry-run renew", func() error { return renew("mallory", "mine", true) }},
		{"delete", func() error { return deleteLease(f, ctxFor("ns", "mallory"), "mine") }},
		{"dry-run delete", func() error {
			_, _, err := f.rest.Delete(ctxFor("ns", "mallory"), "mine", rest.ValidateAllObjectFunc, &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"report", func() error {
			_, err := f.report.Create(ctxFor("ns", "mallory"), "mine", &leasingv1alpha1.ProxyLeaseReport{Result: leasingv1alpha1.ResultBanned, Target: "site.example"}, nil, &metav1.CreateOptions{})
			return err
		}},
	} {
		if err := tc.do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s by another user: %v, want 403", tc.name, err)
		}
	}
	l, ok := f.store.Get(mine.Status.LeaseID)
	if !ok || l.LastResult != before.LastResult || !l.ExpiresAt.Equal(before.ExpiresAt) || l.Revision != before.Revision {
		t.Errorf("another user's requests changed the lease: %+v (live %v)", l, ok)
	}
	// A collection delete by another user releases none of alice's.
	if _, err := f.rest.DeleteCollection(ctxFor("ns", "mallory"), rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}, &metainternalversion.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.store.Get(mine.Status.LeaseID); !ok {
		t.Fatal("another user's collection delete released alice's lease")
	}
	// The control: alice renews and releases.
	if err := renew("alice", "mine", false); err != nil {
		t.Errorf("the holder's renewal: %v", err)
	}
	if err := deleteLease(f, alice, "mine"); err != nil {
		t.Errorf("the holder's delete: %v", err)
	}
}

// Credentials are the holder's alone: anyone else sees the lease without
// status.credentials and with the proxy URL stripped of them; the object
// shown to the holder (and the cache's) is untouched.
func TestForViewer(t *testing.T) {
	exp := metav1.Now()
	obj := &leasingv1alpha1.ProxyLease{Status: leasingv1alpha1.ProxyLeaseStatus{
		HolderIdentity: "alice",
		Proxy:          &leasingv1alpha1.LeasedProxy{Name: "px", URL: "http://u1:secret@10.0.0.9:3128"},
		Credentials:    &leasingv1alpha1.ProxyCredentials{Username: "u1", Password: "secret", ExpireTime: &exp},
	}}
	orig := obj.DeepCopy()
	if got := forViewer(ctxFor("ns", "alice"), obj); got != obj {
		t.Error("the holder got a copy (or a changed object)")
	}
	got := forViewer(ctxFor("ns", "bob"), obj)
	if got.Status.Credentials != nil || got.Status.Proxy.URL != "http://10.0.0.9:3128" {
		t.Errorf("another user sees credentials %+v, URL %q", got.Status.Credentials, got.Status.Proxy.URL)
	}
	if diff := cmp.Diff(orig, obj); diff != "" {
		t.Errorf("the shared object changed (-before +after):\n%s", diff)
	}
	// A request with no user sees no credentials either.
	if got := forViewer(context.Background(), obj); got.Status.Credentials != nil {
		t.Error("a request without a user sees credentials")
	}
}
