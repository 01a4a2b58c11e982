package proxylease

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// A lease is its holder's: RBAC decides who may get, list, renew, report on
// and delete ProxyLeases in a namespace, and of those only the holder (the
// user that created it, or the HTTP token's identity) sees its credentials
// and may renew, report on or release it. A `view` binding, or another
// crawler's, shows the lease without them.

// requester is the holder identity of the request's user, and false when
// the request carries none (never the store's "any holder").
func requester(ctx context.Context) (string, bool) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || u.GetName() == "" {
		return "", false
	}
	return leasing.KubernetesIdentity(u.GetName()).Holder, true
}

// actingHolder is the holder a change is made as: the request's user, or a
// 403 when there is none.
func actingHolder(ctx context.Context, name string) (string, error) {
	holder, ok := requester(ctx)
	if !ok {
		return "", apierrors.NewForbidden(proxyLeaseResource, name, errors.New("the request names no user: only a lease's holder may change it"))
	}
	return holder, nil
}

// holderOf is actingHolder when it holds l, else a 403 (before anything is
// done or shown).
func holderOf(ctx context.Context, name string, l leasing.Lease) (string, error) {
	holder, err := actingHolder(ctx, name)
	if err != nil {
		return "", err
	}
	if holder != l.Holder {
		return "", apierrors.NewForbidden(proxyLeaseResource, name, errors.New("only the lease's holder may renew or release it"))
	}
	return holder, nil
}

// forViewer is obj as the request's user may see it: the holder sees the
// credentials, anyone else the lease without them (status.credentials
// unset, status.proxy.url without userinfo). obj is never changed.
func forViewer(ctx context.Context, obj *leasingv1alpha1.ProxyLease) *leasingv1alpha1.ProxyLease {
	if obj.Status.Credentials == nil && (obj.Status.Proxy == nil || withoutUserinfo(obj.Status.Proxy.URL) == obj.Status.Proxy.URL) {
		return obj
	}
	if viewer, ok := requester(ctx); ok && viewer == obj.Status.HolderIdentity {
		return obj
	}
	c := obj.DeepCopy()
	c.Status.Credentials = nil
	if c.Status.Proxy != nil {
		c.Status.Proxy.URL = withoutUserinfo(c.Status.Proxy.URL)
	}
	return c
}

// viewerWatch shows each event's lease as the watcher may see it.
func viewerWatch(ctx context.Context, w watch.Interface) watch.Interface {
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if pl, ok := e.Object.(*leasingv1alpha1.ProxyLease); ok {
			e.Object = forViewer(ctx, pl)
		}
		return e, true
	})
}
