package proxylease

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/apiserver/pkg/util/dryrun"
	"k8s.io/utils/clock"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

var (
	proxyLeaseResource = leasingv1alpha1.Resource(leasingv1alpha1.ResourceProxyLeases)
	proxyLeaseKind     = leasingv1alpha1.Kind("ProxyLease")
)

// generatedNameAttempts bounds retries when a generated name collides with a
// live lease (a 5-character suffix: rare, but possible with many leases).
const generatedNameAttempts = 5

// maxPrefixForID is the longest generateName a lease is named after with its
// ID (a random ID is 32 characters; a name is at most 253); a longer one gets
// a generated name, as kube makes them.
const maxPrefixForID = 253 - 32

// REST is the storage of proxyleases: create acquires, delete releases,
// update renews, get/list/watch read the cache. Build it with NewREST.
type REST struct {
	svc   *leasing.Service
	cache *leaseCache
	names names.NameGenerator
	// updateMu serialises updates, so two updates conditioned on one
	// resourceVersion cannot both pass the check.
	updateMu sync.Mutex
	table    tableConvertor
}

var (
	_ rest.Storage = (*REST)(nil)

	_ rest.Scoper                     = (*REST)(nil)
	_ rest.KindProvider               = (*REST)(nil)
	_ rest.ShortNamesProvider         = (*REST)(nil)
	_ rest.CategoriesProvider         = (*REST)(nil)
	_ rest.SingularNameProvider       = (*REST)(nil)
	_ rest.Creater                    = (*REST)(nil)
	_ rest.Getter                     = (*REST)(nil)
	_ rest.Lister                     = (*REST)(nil)
	_ rest.Watcher                    = (*REST)(nil)
	_ rest.Updater                    = (*REST)(nil)
	_ rest.GracefulDeleter            = (*REST)(nil)
	_ rest.CollectionDeleter          = (*REST)(nil)
	_ rest.TableConvertor             = (*REST)(nil)
	_ rest.MayReturnFullObjectDeleter = (*REST)(nil)
)

// NewREST returns the storage of proxyleases over svc, with a watch cache
// that keeps watchHistory events for watches that resume; clk drives the
// table's EXPIRES/AGE and the resourceVersion base. Call the returned close
// when the server stops: it unsubscribes the cache from the store.
func NewREST(svc *leasing.Service, clk clock.PassiveClock, watchHistory int) (*REST, func()) {
	cache, closeCache := newLeaseCache(svc, clk, watchHistory)
	return &REST{svc: svc, cache: cache, names: names.SimpleNameGenerator, table: tableConvertor{clock: clk}}, closeCache
}

// Restored follows a lease checkpoint loaded into the store (before this
// replica serves): resourceVersions continue from the checkpoint's base, so a
// watch from a resourceVersion of the previous process resumes.
func (r *REST) Restored(rvBase uint64) { r.cache.restored(rvBase) }

func (r *REST) New() runtime.Object     { return &leasingv1alpha1.ProxyLease{} }
func (r *REST) NewList() runtime.Object { return &leasingv1alpha1.ProxyLeaseList{} }
func (r *REST) Destroy()                {}
func (r *REST) NamespaceScoped() bool   { return true }
func (r *REST) Kind() string            { return "ProxyLease" }
func (r *REST) ShortNames() []string    { return []string{"pxl"} }
func (r *REST) Categories() []string    { return []string{"crawl"} }
func (r *REST) GetSingularName() string { return "proxylease" }

// DeleteReturnsDeletedObject: delete answers with the released lease.
func (r *REST) DeleteReturnsDeletedObject() bool { return true }

func (r *REST) ConvertToTable(ctx context.Context, obj, opts runtime.Object) (*metav1.Table, error) {
	return r.table.ConvertToTable(ctx, obj, opts)
}

// Create acquires a proxy. The request's namespace limits the candidates to
// that namespace's Proxies; the authenticated user is the holder and the
// fairness flow.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	pl, ok := obj.(*leasingv1alpha1.ProxyLease)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a ProxyLease: %T", obj))
	}
	namespace, ok := genericapirequest.NamespaceFrom(ctx)
	if !ok || namespace == "" {
		return nil, apierrors.NewBadRequest("a ProxyLease is namespaced: create it in a namespace")
	}
	if err := rest.EnsureObjectNamespaceMatchesRequestNamespace(namespace, pl); err != nil {
		return nil, err
	}
	holder := ""
	if u, ok := genericapirequest.UserFrom(ctx); ok {
		holder = u.GetName()
	}

	// The UID and creation time are the lease's (buildObject), set on the
	// object only for a dry run, which has no lease.
	pl.UID = ""
	pl.CreationTimestamp = metav1.Time{}
	pl.ResourceVersion = ""
	pl.Generation = 0
	pl.DeletionTimestamp = nil
	pl.DeletionGracePeriodSeconds = nil
	pl.Status = leasingv1alpha1.ProxyLeaseStatus{} // status is the server's
	leasingv1alpha1.SetDefaults_ProxyLease(pl)
	generated := pl.Name == "" && pl.GenerateName != ""
	if pl.Name == "" && pl.GenerateName == "" {
		// No name asked for: generate one as kube does for generateName.
		pl.GenerateName = "lease-"
		generated = true
	}
	if generated {
		// Validated with a generated name; granted, the lease is named
		// generateName + its signed ID, so its name proves it (Reclaim).
		pl.Name = r.names.GenerateName(pl.GenerateName)
	}
	if errs := r.validateCreate(pl); len(errs) > 0 {
		r.svc.Invalid()
		return nil, apierrors.NewInvalid(proxyLeaseKind, pl.Name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, pl); err != nil {
			r.svc.Invalid()
			return nil, err
		}
	}
	if options != nil && dryrun.IsDryRun(options.DryRun) {
		// Validated and defaulted, nothing acquired.
		rest.FillObjectMetaSystemFields(pl)
		return pl, nil
	}

	prefix := ""
	if generated && len(pl.GenerateName) <= maxPrefixForID {
		prefix = pl.GenerateName
	}
	for attempt := 1; ; attempt++ {
		l, err := r.acquire(ctx, namespace, holder, pl, prefix)
		if err == nil {
			return r.cache.render(l), nil
		}
		if generated && leasing.IsAlreadyExists(err) && attempt < generatedNameAttempts {
			pl.Name = r.names.GenerateName(pl.GenerateName)
			continue
		}
		return nil, leaseStatus(pl, err)
	}
}

func (r *REST) validateCreate(pl *leasingv1alpha1.ProxyLease) field.ErrorList {
	errs := leasingv1alpha1.ValidateProxyLease(pl)
	if len(pl.Finalizers) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "finalizers"),
			"ProxyLeases are released at once on delete; finalizers are not supported"))
	}
	return errs
}

// acquire leases for pl, named pl.Name or, with prefix, prefix + the ID.
func (r *REST) acquire(ctx context.Context, namespace, holder string, pl *leasingv1alpha1.ProxyLease, prefix string) (*leasing.Lease, error) {
	name := pl.Name
	if prefix != "" {
		name = ""
	}
	id := leasing.KubernetesIdentity(holder)
	if u, ok := genericapirequest.UserFrom(ctx); ok {
		id.Groups = u.GetGroups() // for priority grants to groups
	}
	l, err := r.svc.Acquire(ctx, leasing.Request{
		Namespace:  namespace,
		Name:       name,
		NamePrefix: prefix,
		Selector:   pl.Spec.Selector,
		Selectors:  pl.Spec.Selectors,
		Target:     pl.Spec.Target,
		TTL:        leasing.Seconds(int64(*pl.Spec.TTLSeconds)),
		Identity:   id,
		Meta:       metadataOf(pl),
		Wait:       leasing.Seconds(int64(pl.Spec.WaitSeconds)),
		Priority:   int(pl.Spec.Priority),
	})
	if err != nil {
		return nil, err
	}
	if l.Namespace != namespace || l.Proxy.Namespace != namespace {
		// Tenancy is the namespace: never hand out another namespace's proxy.
		_, _ = r.svc.Release(leasing.AnyHolder, l.ID)
		return nil, fmt.Errorf("lease store granted proxy %s/%s for namespace %q; released it", l.Proxy.Namespace, l.Proxy.Name, namespace)
	}
	return l, nil
}

// Get returns a live lease.
func (r *REST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	_, obj, ok, err := r.cache.get(ctx, genericapirequest.NamespaceValue(ctx), name)
	if err != nil {
		return nil, statusFor(proxyLeaseKind, name, nil, err, nil)
	}
	if !ok {
		return nil, apierrors.NewNotFound(proxyLeaseResource, name)
	}
	return forViewer(ctx, obj), nil
}

// List returns the live leases of the request's namespace (all namespaces
// for a cluster-wide list) matching the label and field selectors. It serves
// the newest state: limit is ignored (the whole list is one page) and an
// Exact resourceVersionMatch other than the newest is 410 Gone.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	items, rev, err := r.cache.list(ctx, genericapirequest.NamespaceValue(ctx), predicateFor(options))
	if err != nil {
		return nil, statusFor(proxyLeaseKind, "", nil, err, nil)
	}
	if options != nil && options.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
		want, err := parseResourceVersion(options.ResourceVersion)
		if err != nil {
			return nil, err
		}
		if want != rev {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("resourceVersion %d is not kept; the newest is %d", want, rev))
		}
	}
	for i := range items {
		if v := forViewer(ctx, &items[i]); v != &items[i] {
			items[i] = *v
		}
	}
	list := &leasingv1alpha1.ProxyLeaseList{Items: items}
	list.ResourceVersion = fmt.Sprint(rev)
	if list.Items == nil {
		list.Items = []leasingv1alpha1.ProxyLease{}
	}
	return list, nil
}

// Watch streams lease events; see leaseCache.watch.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	w, err := r.cache.watch(ctx, genericapirequest.NamespaceValue(ctx), options)
	if err != nil {
		return nil, statusFor(proxyLeaseKind, "", nil, err, nil)
	}
	return viewerWatch(ctx, w), nil
}

// Update renews the lease for spec.ttlSeconds from now; labels and
// annotations may change too, the rest of spec may not. Every update renews,
// so `kubectl patch … -p '{"spec":{"ttlSeconds":300}}'` renews even when the
// TTL is unchanged.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	namespace := genericapirequest.NamespaceValue(ctx)
	r.updateMu.Lock()
	cur, old, ok, err := r.lookup(ctx, namespace, name)
	if err != nil {
		r.updateMu.Unlock()
		return nil, false, statusFor(proxyLeaseKind, name, nil, err, nil)
	}
	if !ok {
		r.updateMu.Unlock()
		if !forceAllowCreate {
			// A plain PUT of a missing lease: acquiring is a POST.
			return nil, false, apierrors.NewNotFound(proxyLeaseResource, name)
		}
		// Server-side apply of a new lease (forceAllowCreate): acquire, which
		// may wait, outside the renewal lock.
		return r.createFromUpdate(ctx, name, objInfo, createValidation, options)
	}
	defer r.updateMu.Unlock()
	// Only the holder renews (another user RBAC lets update ProxyLeases
	// gets 403, a dry run included).
	holder, err := holderOf(ctx, name, cur)
	if err != nil {
		return nil, false, err
	}
	newObj, err := objInfo.UpdatedObject(ctx, old.DeepCopy())
	if err != nil {
		return nil, false, err
	}
	pl, ok := newObj.(*leasingv1alpha1.ProxyLease)
	if !ok {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("not a ProxyLease: %T", newObj))
	}
	if pl.ResourceVersion != "" && pl.ResourceVersion != old.ResourceVersion {
		return nil, false, apierrors.NewConflict(proxyLeaseResource, name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	// An update without a resourceVersion is unconditional (as for most
	// kube types): renewing needs no read-modify-write.
	if pl.ResourceVersion == "" {
		pl.ResourceVersion = old.ResourceVersion
	}
	// System fields and status stay the server's.
	if pl.UID == "" {
		pl.UID = old.UID
	}
	pl.CreationTimestamp = old.CreationTimestamp
	pl.Generation = old.Generation
	pl.DeletionTimestamp = nil
	pl.DeletionGracePeriodSeconds = nil
	pl.Status = old.Status
	leasingv1alpha1.SetDefaults_ProxyLease(pl)
	errs := leasingv1alpha1.ValidateProxyLeaseUpdate(pl, old)
	if len(pl.Finalizers) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "finalizers"), "finalizers are not supported"))
	}
	if len(errs) > 0 {
		return nil, false, apierrors.NewInvalid(proxyLeaseKind, name, errs)
	}
	if updateValidation != nil {
		if err := updateValidation(ctx, pl, old); err != nil {
			return nil, false, err
		}
	}
	if options != nil && dryrun.IsDryRun(options.DryRun) {
		return pl, false, nil
	}
	// The new labels and annotations land in the same change.
	meta := metadataOf(pl)
	l, err := r.svc.Update(holder, cur.ID, leasing.Seconds(int64(*pl.Spec.TTLSeconds)), &meta)
	if err != nil {
		return nil, false, leaseStatus(pl, err)
	}
	return r.cache.render(l), false, nil
}

func (r *REST) createFromUpdate(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo,
	createValidation rest.ValidateObjectFunc, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	newObj, err := objInfo.UpdatedObject(ctx, &leasingv1alpha1.ProxyLease{})
	if err != nil {
		return nil, false, err
	}
	pl, ok := newObj.(*leasingv1alpha1.ProxyLease)
	if !ok {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("not a ProxyLease: %T", newObj))
	}
	if pl.Name != name {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("metadata.name %q does not match the request's %q", pl.Name, name))
	}
	createOpts := &metav1.CreateOptions{}
	if options != nil {
		createOpts.DryRun = options.DryRun
		createOpts.FieldManager = options.FieldManager
	}
	obj, err := r.Create(ctx, pl, createValidation, createOpts)
	if err != nil {
		return nil, false, err
	}
	return obj, true, nil
}

// lookup is the live lease namespace/name, rendered, for a request that
// changes it: when there is none, a lease an operator crash lost is taken
// back first if name is its signed ID (leasing.Service.Reclaim). ok false:
// no such lease; err: one that cannot come back (the leasing error: ended,
// no room).
func (r *REST) lookup(ctx context.Context, namespace, name string) (leasing.Lease, *leasingv1alpha1.ProxyLease, bool, error) {
	if l, obj, ok, err := r.cache.get(ctx, namespace, name); err != nil || ok {
		return l, obj, ok, err
	}
	l, err := r.svc.Reclaim(leasing.AnyHolder, namespace, name)
	switch {
	case leasing.IsNotFound(err):
		return leasing.Lease{}, nil, false, nil
	case err != nil:
		return leasing.Lease{}, nil, false, err
	}
	return *l, r.cache.render(l), true, nil
}

// Delete releases the lease.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	cur, obj, ok, err := r.lookup(ctx, genericapirequest.NamespaceValue(ctx), name)
	if err != nil && !leasing.IsEnded(err) && !leasing.IsNoRoom(err) {
		return nil, false, statusFor(proxyLeaseKind, name, nil, err, nil)
	}
	if !ok || err != nil {
		// A lease released, expired, or lost in a crash with its proxy
		// taken since: gone, as for any object deleted twice.
		return nil, false, apierrors.NewNotFound(proxyLeaseResource, name)
	}
	if options != nil && options.Preconditions != nil {
		if p := options.Preconditions.UID; p != nil && *p != obj.UID {
			return nil, false, apierrors.NewConflict(proxyLeaseResource, name,
				fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *p, obj.UID))
		}
		if p := options.Preconditions.ResourceVersion; p != nil && *p != obj.ResourceVersion {
			return nil, false, apierrors.NewConflict(proxyLeaseResource, name,
				fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p, obj.ResourceVersion))
		}
	}
	// Only the holder releases (another user RBAC lets delete ProxyLeases
	// gets 403, a dry run included).
	holder, err := holderOf(ctx, name, cur)
	if err != nil {
		return nil, false, err
	}
	if deleteValidation != nil {
		if err := deleteValidation(ctx, obj); err != nil {
			return nil, false, err
		}
	}
	if options != nil && dryrun.IsDryRun(options.DryRun) {
		return obj, true, nil
	}
	released, err := r.svc.Release(holder, cur.ID)
	if err != nil {
		return nil, false, leaseStatus(obj, err)
	}
	if !released {
		return nil, false, apierrors.NewNotFound(proxyLeaseResource, name)
	}
	return obj, true, nil
}

// DeleteCollection releases every lease of the request's user that the list
// options select; other holders' leases are left alone.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions,
	listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	items, rev, err := r.cache.list(ctx, genericapirequest.NamespaceValue(ctx), predicateFor(listOptions))
	if err != nil {
		return nil, statusFor(proxyLeaseKind, "", nil, err, nil)
	}
	out := &leasingv1alpha1.ProxyLeaseList{Items: []leasingv1alpha1.ProxyLease{}}
	out.ResourceVersion = fmt.Sprint(rev)
	holder, ok := requester(ctx)
	for i := range items {
		if !ok || items[i].Status.HolderIdentity != holder {
			continue
		}
		obj, _, err := r.Delete(genericapirequest.WithNamespace(ctx, items[i].Namespace), items[i].Name, deleteValidation, options)
		if apierrors.IsNotFound(err) {
			continue // ended meanwhile
		}
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *obj.(*leasingv1alpha1.ProxyLease))
	}
	return out, nil
}
