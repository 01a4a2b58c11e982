package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// TemplateHash names a pool's template (its labels and Proxy spec, as
// stored): every Proxy the pool makes carries it (TemplateHashLabel), so a
// template change shows which Proxies are of an older one.
func TemplateHash(pool *crawlv1alpha1.ProxyPool) string {
	b, _ := json.Marshal(pool.Spec.Template) // a struct of strings, maps and numbers: never fails
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64())
}

// splitByTemplate parts live Proxies into those of the current template and
// the older ones.
func splitByTemplate(live []*crawlv1alpha1.Proxy, hash string) (cur, old []*crawlv1alpha1.Proxy) {
	for _, p := range live {
		if p.Labels[crawlv1alpha1.TemplateHashLabel] == hash {
			cur = append(cur, p)
		} else {
			old = append(old, p)
		}
	}
	return cur, old
}

// strategyOf returns spec.strategy's bounds with their defaults.
func strategyOf(pool *crawlv1alpha1.ProxyPool) (surge, unavailable int32) {
	surge, unavailable = 1, 0
	if s := pool.Spec.Strategy.MaxSurge; s != nil {
		surge = *s
	}
	if u := pool.Spec.Strategy.MaxUnavailable; u != nil {
		unavailable = *u
	}
	if surge == 0 && unavailable == 0 {
		surge = 1 // the CRD forbids both 0; a pool must still be able to roll
	}
	return surge, unavailable
}

// roll takes one step of replacing Proxies of an older template: new ones
// are created up to desired + maxSurge live, and old ones retired (unleased
// first: deleted; leased: drained, their leases intact until they end) as
// long as the Ready Proxies stay at desired - maxUnavailable or more.
func (r *Reconciler) roll(ctx context.Context, pool *crawlv1alpha1.ProxyPool, st *observed, cur, old []*crawlv1alpha1.Proxy,
	desired int32, now time.Time, exp *expectation) error {
	surge, unavailable := strategyOf(pool)
	live := int32(len(st.live))
	current := int32(len(cur))
	for live < desired+surge && current < desired {
		if err := r.create(ctx, pool, exp); err != nil {
			return err
		}
		live++
		current++
	}
	ready := int32(0)
	for _, p := range st.live {
		if isReady(p) {
			ready++
		}
	}
	// An old Proxy that is not Ready adds nothing: it goes at once. A Ready
	// one only while Ready stays at desired - maxUnavailable or more.
	minReady := desired - unavailable
	for _, p := range victimsFirst(old, st) {
		if isReady(p) && ready-1 < minReady {
			break
		}
		if err := r.retire(ctx, pool, p, st, now, exp); err != nil {
			return err
		}
		if isReady(p) {
			ready--
		}
	}
	return nil
}
