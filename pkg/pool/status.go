package pool

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// computeStatus is the pool's status from what this reconcile observed and
// decided.
func computeStatus(pool *crawlv1alpha1.ProxyPool, st *observed, waiting int, dec Decision) crawlv1alpha1.ProxyPoolStatus {
	s := *pool.Status.DeepCopy()
	s.Replicas = int32(len(st.live) + len(st.draining) + len(st.drained))
	s.ReadyReplicas = int32(st.ready)
	s.LeasedReplicas = int32(st.leased)
	s.DrainingReplicas = int32(len(st.draining) + len(st.drained))
	s.WaitingRequests = int32(waiting)
	s.DesiredReplicas, s.DesiredReason = dec.Replicas, dec.Reason
	s.Selector = crawlv1alpha1.PoolLabel + "=" + pool.Name
	s.ObservedGeneration = pool.Generation
	c := metav1.Condition{Type: crawlv1alpha1.ConditionScaled, Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonAtDesired,
		ObservedGeneration: pool.Generation,
		Message:            fmt.Sprintf("%d of %d proxies, none draining", len(st.live), dec.Replicas)}
	switch {
	case s.DrainingReplicas > 0:
		c.Status, c.Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonDraining
		c.Message = fmt.Sprintf("%d proxies draining: no new leases; deleted when their leases end or the drain timeout passes", s.DrainingReplicas)
	case int32(len(st.live)) != dec.Replicas:
		c.Status, c.Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonScaling
		c.Message = fmt.Sprintf("%d proxies, scaling to %d (%s)", len(st.live), dec.Replicas, dec.Reason)
	}
	meta.SetStatusCondition(&s.Conditions, c)
	return s
}

// patchStatus writes the status once, only when it changed.
func (r *Reconciler) patchStatus(ctx context.Context, base, pool *crawlv1alpha1.ProxyPool, st *observed, waiting int, dec Decision) error {
	pool.Status = computeStatus(pool, st, waiting, dec)
	if equality.Semantic.DeepEqual(base.Status, pool.Status) {
		return nil
	}
	// The whole status, not a diff from base: a diff leaves out the counts
	// that are 0 on both sides, which a status never written yet then lacks
	// (kubectl's LEASED column would show nothing instead of 0).
	patch, err := json.Marshal(map[string]any{"status": pool.Status})
	if err != nil {
		return fmt.Errorf("encoding status of pool %s: %w", pool.Name, err)
	}
	if err := r.Client.Status().Patch(ctx, pool, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching status of pool %s: %w", pool.Name, err)
	}
	return nil
}
