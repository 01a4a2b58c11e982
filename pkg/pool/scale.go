package pool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// expectationTimeout bounds how long a pool waits for the cache to show its
// own creates and deletes before it acts on what it sees.
const expectationTimeout = 30 * time.Second

// expectation is what a pool's last step did and the cache must show
// before the next step (so that a reconcile that runs before the cache
// caught up does not create or delete twice), as a ReplicaSet's.
type expectation struct {
	creates map[string]bool    // names created, not yet seen
	deletes map[types.UID]bool // deleted, still seen without a deletionTimestamp
	at      time.Time
}

// members lists the pool's Proxies: those it controls and still labels as
// its own, plus labelled orphans it adopts; a controlled Proxy whose label
// no longer names the pool is released (its owner reference removed), as a
// ReplicaSet releases a Pod that stops matching. listed is the name of every
// Proxy of the namespace the cache showed, members or not.
func (r *Reconciler) members(ctx context.Context, pool *crawlv1alpha1.ProxyPool) (out []*crawlv1alpha1.Proxy, listed map[string]bool, _ error) {
	var list crawlv1alpha1.ProxyList
	if err := r.Client.List(ctx, &list, client.InNamespace(pool.Namespace)); err != nil {
		return nil, nil, fmt.Errorf("listing proxies of pool %s/%s: %w", pool.Namespace, pool.Name, err)
	}
	listed = make(map[string]bool, len(list.Items))
	for i := range list.Items {
		listed[list.Items[i].Name] = true
	}
	for i := range list.Items {
		p := &list.Items[i]
		ref := metav1.GetControllerOf(p)
		labelled := p.Labels[crawlv1alpha1.PoolLabel] == pool.Name
		switch {
		case ref != nil && ref.UID == pool.UID && labelled:
			out = append(out, p)
		case ref != nil && ref.UID == pool.UID:
			orig := p.DeepCopy()
			p.OwnerReferences = slices.DeleteFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == pool.UID })
			if err := r.Client.Patch(ctx, p, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
				return nil, nil, fmt.Errorf("releasing proxy %s: %w", p.Name, err)
			}
			log.FromContext(ctx).Info("proxy released: its label no longer names the pool", "proxy", p.Name)
			r.event(pool, p, EventReasonReleased, actionRelease, "released proxy %s: its %s label no longer names the pool", p.Name, crawlv1alpha1.PoolLabel)
		case ref == nil && labelled && p.DeletionTimestamp.IsZero():
			orig := p.DeepCopy()
			if err := controllerutil.SetControllerReference(pool, p, r.Client.Scheme()); err != nil {
				return nil, nil, fmt.Errorf("adopting proxy %s: %w", p.Name, err)
			}
			// Adopted as it is: of the current template, not rolled.
			if _, ok := p.Labels[crawlv1alpha1.TemplateHashLabel]; !ok {
				p.Labels[crawlv1alpha1.TemplateHashLabel] = TemplateHash(pool)
			}
			if err := r.Client.Patch(ctx, p, client.MergeFrom(orig)); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, nil, fmt.Errorf("adopting proxy %s: %w", p.Name, err)
			}
			log.FromContext(ctx).Info("proxy adopted", "proxy", p.Name)
			r.event(pool, p, EventReasonAdopted, actionAdopt, "adopted proxy %s (labelled %s=%s, no owner)", p.Name, crawlv1alpha1.PoolLabel, pool.Name)
			out = append(out, p)
		}
	}
	return out, listed, nil
}

// observed is a pool's Proxies as this reconcile sees them.
type observed struct {
	// live serve the pool; draining are being removed while leased;
	// drained are draining ones whose leases ended or whose drain timed out.
	live, draining, drained []*crawlv1alpha1.Proxy
	// listed names every Proxy of the namespace the cache showed: one
	// this pool created counts as seen even when it is no member (released
	// before this pool's cache saw it labelled, say).
	listed              map[string]bool
	deleting            int
	ready, leased, held int
	leases              map[string]int
}

func observe(pool *crawlv1alpha1.ProxyPool, members []*crawlv1alpha1.Proxy, counts map[lease.ProxyKey]int, drainTimeout time.Duration, now time.Time) *observed {
	st := &observed{leases: map[string]int{}}
	for _, p := range members {
		n := counts[lease.ProxyKey{Namespace: p.Namespace, Name: p.Name}]
		st.leases[p.Name] = n
		st.held += n
		if n > 0 {
			st.leased++
		}
		if p.Status.Phase == crawlv1alpha1.PhaseReady {
			st.ready++
		}
		switch {
		case !p.DeletionTimestamp.IsZero():
			st.deleting++
		case p.Annotations[crawlv1alpha1.DrainingAnnotation] != "":
			since, err := time.Parse(time.RFC3339, p.Annotations[crawlv1alpha1.DrainingAnnotation])
			if n == 0 || err != nil || now.Sub(since) >= drainTimeout {
				st.drained = append(st.drained, p)
			} else {
				st.draining = append(st.draining, p)
			}
		default:
			st.live = append(st.live, p)
		}
	}
	return st
}

// scale takes one step towards desired: drained Proxies are deleted; to grow,
// draining ones are taken back before new ones are made; to shrink, unleased
// Proxies are deleted first (not Ready ones, then the newest), leased ones
// drained. Nothing is done while the cache has not shown the last step.
//
// While the cache has not caught up with the last step it does nothing and
// returns how long the expectation may still hold: the caller requeues then,
// so a step whose effect never shows (a created Proxy deleted at once) does
// not leave the pool unreconciled until some unrelated event.
func (r *Reconciler) scale(ctx context.Context, pool *crawlv1alpha1.ProxyPool, st *observed, desired int32, now time.Time) (time.Duration, error) {
	key := client.ObjectKeyFromObject(pool)
	if wait := r.expectationWait(key, st, now); wait > 0 {
		return wait, nil
	}
	exp := expectation{creates: map[string]bool{}, deletes: map[types.UID]bool{}, at: now}
	defer r.setExpectation(key, exp)
	for _, p := range st.drained {
		if err := r.delete(ctx, p, &exp); err != nil {
			return 0, err
		}
		log.FromContext(ctx).Info("drained proxy deleted", "proxy", p.Name, "leases", st.leases[p.Name])
		r.event(pool, p, EventReasonDrained, actionDelete, "deleted drained proxy %s (%d leases left: drained, or the drain timeout passed)", p.Name, st.leases[p.Name])
	}
	hash := TemplateHash(pool)
	if cur, old := splitByTemplate(st.live, hash); len(old) > 0 {
		return 0, r.roll(ctx, pool, st, cur, old, desired, now, &exp)
	}
	live := int32(len(st.live))
	switch {
	case live < desired:
		need := desired - live
		for _, p := range st.draining {
			if need == 0 {
				break
			}
			if err := r.setDraining(ctx, p, ""); err != nil {
				return 0, err
			}
			need--
		}
		for ; need > 0; need-- {
			if err := r.create(ctx, pool, &exp); err != nil {
				return 0, err
			}
		}
	case live > desired:
		for _, p := range victimsFirst(st.live, st)[:live-desired] {
			if err := r.retire(ctx, pool, p, st, now, &exp); err != nil {
				return 0, err
			}
		}
	}
	return 0, nil
}

// victimsFirst orders Proxies for removal: unleased first, then not Ready,
// then the newest.
func victimsFirst(ps []*crawlv1alpha1.Proxy, st *observed) []*crawlv1alpha1.Proxy {
	v := slices.Clone(ps)
	slices.SortStableFunc(v, func(a, b *crawlv1alpha1.Proxy) int {
		if la, lb := st.leases[a.Name] > 0, st.leases[b.Name] > 0; la != lb {
			return boolOrder(la, lb)
		}
		if ra, rb := isReady(a), isReady(b); ra != rb {
			return boolOrder(ra, rb)
		}
		return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) // newest first
	})
	return v
}

func isReady(p *crawlv1alpha1.Proxy) bool { return p.Status.Phase == crawlv1alpha1.PhaseReady }

// retire removes p from the pool: deleted when unleased, else drained.
func (r *Reconciler) retire(ctx context.Context, pool *crawlv1alpha1.ProxyPool, p *crawlv1alpha1.Proxy, st *observed, now time.Time, exp *expectation) error {
	if st.leases[p.Name] == 0 {
		return r.delete(ctx, p, exp)
	}
	if err := r.setDraining(ctx, p, now.UTC().Format(time.RFC3339)); err != nil {
		return err
	}
	log.FromContext(ctx).Info("leased proxy draining", "proxy", p.Name, "leases", st.leases[p.Name])
	r.event(pool, p, EventReasonDraining, actionDrain, "draining proxy %s: %d leases, no new ones; deleted when they end or after %s", p.Name, st.leases[p.Name], r.Options.DrainTimeout)
	return nil
}

// boolOrder sorts false before true.
func boolOrder(a, b bool) int {
	if !a && b {
		return -1
	}
	return 1
}

func (r *Reconciler) create(ctx context.Context, pool *crawlv1alpha1.ProxyPool, exp *expectation) error {
	labels := maps.Clone(pool.Spec.Template.Metadata.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[crawlv1alpha1.PoolLabel] = pool.Name
	labels[crawlv1alpha1.TemplateHashLabel] = TemplateHash(pool)
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pool.Name + "-", Namespace: pool.Namespace, Labels: labels},
		Spec:       *pool.Spec.Template.Spec.DeepCopy(),
	}
	if err := controllerutil.SetControllerReference(pool, p, r.Client.Scheme()); err != nil {
		return fmt.Errorf("creating a proxy of pool %s: %w", pool.Name, err)
	}
	if err := r.Client.Create(ctx, p); err != nil {
		return fmt.Errorf("creating a proxy of pool %s: %w", pool.Name, err)
	}
	exp.creates[p.Name] = true
	log.FromContext(ctx).Info("proxy created", "proxy", p.Name)
	return nil
}

func (r *Reconciler) delete(ctx context.Context, p *crawlv1alpha1.Proxy, exp *expectation) error {
	if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting proxy %s: %w", p.Name, err)
	}
	exp.deletes[p.UID] = true
	return nil
}

// setDraining sets (since, RFC 3339) or removes ("") the draining mark.
func (r *Reconciler) setDraining(ctx context.Context, p *crawlv1alpha1.Proxy, since string) error {
	orig := p.DeepCopy()
	if since == "" {
		delete(p.Annotations, crawlv1alpha1.DrainingAnnotation)
	} else {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[crawlv1alpha1.DrainingAnnotation] = since
	}
	if err := r.Client.Patch(ctx, p, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("marking proxy %s draining=%q: %w", p.Name, since, err)
	}
	return nil
}

// setReplicas writes the autoscaler's decision into spec.replicas.
func (r *Reconciler) setReplicas(ctx context.Context, pool *crawlv1alpha1.ProxyPool, n int32, reason string) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
	if err := r.Client.Patch(ctx, pool.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("scaling pool %s to %d: %w", pool.Name, n, err)
	}
	log.FromContext(ctx).Info("pool scaled", "from", replicasOf(pool), "to", n)
	r.event(pool, nil, EventReasonScaled, actionScale, "scaled from %d to %d (%s)", replicasOf(pool), n, reason)
	return nil
}

// expectationWait is zero when the cache shows what the pool's last step
// did (or it did nothing, or expectationTimeout passed); else how long the
// expectation may still hold.
func (r *Reconciler) expectationWait(key types.NamespacedName, st *observed, now time.Time) time.Duration {
	r.mu.Lock()
	exp, ok := r.expect[key]
	r.mu.Unlock()
	left := expectationTimeout - now.Sub(exp.at)
	if !ok || left <= 0 {
		return 0
	}
	// Members come from the same listing: listed is every name seen.
	for name := range exp.creates {
		if !st.listed[name] {
			return left
		}
	}
	present := map[types.UID]bool{}
	for _, group := range [][]*crawlv1alpha1.Proxy{st.live, st.draining, st.drained} {
		for _, p := range group {
			present[p.UID] = true
		}
	}
	for uid := range exp.deletes {
		if present[uid] {
			return left
		}
	}
	return 0
}

func (r *Reconciler) setExpectation(key types.NamespacedName, exp expectation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expect == nil {
		r.expect = map[types.NamespacedName]expectation{}
	}
	if len(exp.creates) == 0 && len(exp.deletes) == 0 {
		delete(r.expect, key)
		return
	}
	r.expect[key] = exp
}
