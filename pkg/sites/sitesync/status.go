package sitesync

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// +kubebuilder:rbac:groups=crawl.example.com,resources=sitepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=crawl.example.com,resources=sitepolicies/status,verbs=get;update;patch

// Status writes each SitePolicy's budget to its status every Interval, on
// the replica that serves leases (the only one whose store grants), and
// only what changed.
type Status struct {
	Client   client.Client
	Store    Store
	Sync     *Sync
	Clock    clock.WithTicker
	Interval time.Duration
}

// DefaultStatusInterval is how often the statuses are compared.
const DefaultStatusInterval = 5 * time.Second

// NeedLeaderElection: only the leader's store grants leases.
func (s *Status) NeedLeaderElection() bool { return true }

// Start writes the statuses until ctx ends.
func (s *Status) Start(ctx context.Context) error {
	t := s.Clock.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if err := s.Write(ctx); err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Info("writing SitePolicy statuses failed", "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Write compares every SitePolicy's status with the store's budget and
// patches those that differ.
func (s *Status) Write(ctx context.Context) error {
	var list crawlv1alpha1.SitePolicyList
	if err := s.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing SitePolicies: %w", err)
	}
	byName := map[string]sites.Status{}
	for _, st := range s.Store.SiteStatuses() {
		byName[st.Policy] = st
	}
	var errs []string
	for i := range list.Items {
		sp := &list.Items[i]
		want := desired(sp, byName[sp.Name], s.Sync.Conflict(sp.Name), s.Clock.Now())
		if equality.Semantic.DeepEqual(want, sp.Status) {
			continue
		}
		base := sp.DeepCopy()
		sp.Status = want
		if err := s.Client.Status().Patch(ctx, sp, client.MergeFrom(base)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Sprintf("%s: %v", sp.Name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("patching SitePolicy statuses: %s", strings.Join(errs, "; "))
	}
	return nil
}

// desired is sp's status for budget st and the store's conflict ("" none).
func desired(sp *crawlv1alpha1.SitePolicy, st sites.Status, conflict string, now time.Time) crawlv1alpha1.SitePolicyStatus {
	out := crawlv1alpha1.SitePolicyStatus{
		GrantsPerSecond:    grantsPerSecond(st.Rate),
		Limit:              int32(st.Limit),
		Live:               int32(st.Live),
		RateLimitedPercent: int32(math.Round(st.RefusedShare * 100)),
		Cuts:               st.Cuts,
		Tier:               int32(st.Tier),
		ObservedGeneration: sp.Generation,
		Conditions:         append([]metav1.Condition(nil), sp.Status.Conditions...),
	}
	for _, n := range st.TierLive {
		out.TierLive = append(out.TierLive, int32(n))
	}
	cond := metav1.Condition{Type: crawlv1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonApplied,
		Message: fmt.Sprintf("every lease for %s counts against this budget", strings.Join(sp.Spec.Sites, ", ")), ObservedGeneration: sp.Generation}
	switch {
	case strings.Contains(conflict, "is already SitePolicy"):
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, crawlv1alpha1.ReasonSiteTaken, conflict+": the policy applies to its other sites"
	case conflict != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, crawlv1alpha1.ReasonInvalid, conflict
	}
	apimeta.SetStatusCondition(&out.Conditions, metav1.Condition{Type: cond.Type, Status: cond.Status, Reason: cond.Reason,
		Message: cond.Message, ObservedGeneration: cond.ObservedGeneration, LastTransitionTime: metav1.NewTime(now)})
	return out
}

// grantsPerSecond is rate as a quantity in thousandths (nil: no bound).
func grantsPerSecond(rate float64) *resource.Quantity {
	if rate <= 0 {
		return nil
	}
	return resource.NewMilliQuantity(int64(math.Round(rate*1000)), resource.DecimalSI)
}
