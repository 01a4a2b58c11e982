package proxylease

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// leaseStatus is the answer to a failed request on ProxyLease pl.
func leaseStatus(pl *leasingv1alpha1.ProxyLease, err error) error {
	return statusFor(proxyLeaseKind, pl.Name, field.NewPath("spec"), err, func(e *leasing.Error) error {
		why := ""
		if pl.Spec.WaitSeconds > 0 {
			why = fmt.Sprintf("no proxy became free within waitSeconds (%d)", pl.Spec.WaitSeconds)
		}
		return noMatchStatus(pl, &e.Counts, e.QueuedAhead, why)
	})
}

// statusFor is the one place the leasing Service's error vocabulary becomes
// Kubernetes API statuses, for object name of kind, whose request fields are
// under root (nil: at the top); noMatch renders a ReasonNoMatch.
func statusFor(kind schema.GroupKind, name string, root *field.Path, err error, noMatch func(*leasing.Error) error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return err
	}
	e := leasing.AsError(err)
	switch e.Reason {
	case leasing.ReasonNoMatch:
		if noMatch != nil {
			return noMatch(e)
		}
		return apierrors.NewConflict(proxyLeaseResource, name, err)
	case leasing.ReasonQueueFull:
		secs := int((e.RetryAfter + time.Second - 1) / time.Second)
		return apierrors.NewTooManyRequests(fmt.Sprintf("the wait queue for %s %s is full: %v", kind.Kind, name, err), max(secs, 1))
	case leasing.ReasonInvalid:
		errs := make(field.ErrorList, 0, len(e.Fields))
		for _, fe := range e.Fields {
			c := *fe
			if root != nil {
				c.Field = root.Child(fe.Field).String()
			}
			errs = append(errs, &c)
		}
		return apierrors.NewInvalid(kind, name, errs)
	case leasing.ReasonNotFound:
		return apierrors.NewNotFound(proxyLeaseResource, name)
	case leasing.ReasonEnded:
		st := apierrors.NewNotFound(proxyLeaseResource, name)
		st.ErrStatus.Message += ": " + leasing.EndedMessage(err)
		return st
	case leasing.ReasonNoRoom:
		return apierrors.NewConflict(proxyLeaseResource, name, err)
	case leasing.ReasonForbidden:
		return apierrors.NewForbidden(proxyLeaseResource, name, err)
	case leasing.ReasonCooldownLimit:
		// 403, as a ResourceQuota refusal: a 429's Retry-After would have
		// client-go sleep and retry for up to a cooldown window on its own.
		return apierrors.NewForbidden(proxyLeaseResource, name, err)
	case leasing.ReasonAlreadyExists:
		return apierrors.NewAlreadyExists(proxyLeaseResource, name)
	case leasing.ReasonCancelled:
		return apierrors.NewTimeoutError(fmt.Sprintf("gave up waiting for a proxy for %s %s: %v", kind.Kind, name, err), 0)
	case leasing.ReasonShuttingDown, leasing.ReasonNotLeader:
		// Retry-After: client-go (kubectl) retries on its own, and the
		// next request reaches the replica that took over.
		st := apierrors.NewServiceUnavailable(fmt.Sprintf("%s %s: %v", kind.Kind, name, err))
		st.ErrStatus.Details = &metav1.StatusDetails{Group: proxyLeaseResource.Group, Kind: proxyLeaseResource.Resource, Name: name, RetryAfterSeconds: 1}
		return st
	}
	return apierrors.NewInternalError(fmt.Errorf("%s %s: %w", kind.Kind, name, err))
}

// Status cause types of the no-match Status: one per count, the message is
// the number.
const (
	CauseProxiesConsidered = metav1.CauseType("ProxiesConsidered")
	CauseProxiesAtCapacity = metav1.CauseType("ProxiesAtCapacity")
	CauseProxiesInCooldown = metav1.CauseType("ProxiesInCooldown")
	CauseProxiesUnhealthy  = metav1.CauseType("ProxiesUnhealthy")
	CauseProxiesFree       = metav1.CauseType("ProxiesFree")
	// CauseRequestsQueuedAhead counts the requests of the same user for the
	// same selector and target that wait ahead of this one.
	CauseRequestsQueuedAhead = metav1.CauseType("RequestsQueuedAhead")
	// CauseSitePolicy names the SitePolicy whose budget for the target's
	// site is in use (only when one held the lease back).
	CauseSitePolicy = metav1.CauseType("SitePolicy")
	// CauseLadderTier is the tier of spec.selectors the counts are of,
	// when past the first (every proxy of the tiers before cools for the
	// target).
	CauseLadderTier = metav1.CauseType("LadderTier")
)

// noMatchStatus is the answer when no proxy can be leased: 409 Conflict, as
// the HTTP API's no_match. Not 503 (the server is fine, and client-go would
// retry a 503 with Retry-After on its own) and not 429 (that is the answer to
// a full wait queue). The message names the counts; Details.Causes carries
// them for programs.
func noMatchStatus(pl *leasingv1alpha1.ProxyLease, nm *leasing.NoMatchCounts, ahead int, why string) error {
	switch {
	case ahead > 0:
		why = fmt.Sprintf("%d earlier ProxyLeases of this user for the same selector and target wait for a proxy ahead of this one", ahead)
	case why != "":
	case nm.Site != nil:
		why = nm.Site.Error()
	case nm.Tier > 0:
		why = fmt.Sprintf("no proxy of tier %d (spec.selectors[%d]) is free; every proxy of the tiers before it cools for the target", nm.Tier, nm.Tier)
	case nm.Considered == 0:
		why = "no Proxy in the namespace matches the selector"
	case nm.AtCapacity == nm.Considered:
		why = "every matching Proxy is at capacity (leased)"
	case nm.Unhealthy == nm.Considered:
		why = "every matching Proxy is unhealthy"
	case nm.InCooldown == nm.Considered:
		why = "every matching Proxy is cooling down for this target"
	default:
		why = "no matching Proxy is free"
	}
	msg := fmt.Sprintf("no proxy available for ProxyLease %s/%s (selector %s, target %q): %s: considered %d, at capacity %d, in cooldown %d, unhealthy %d, free %d, queued ahead %d",
		pl.Namespace, pl.Name, selectorsString(&pl.Spec), pl.Spec.Target, why,
		nm.Considered, nm.AtCapacity, nm.InCooldown, nm.Unhealthy, nm.Free, ahead)
	causes := []metav1.StatusCause{
		{Type: CauseProxiesConsidered, Message: fmt.Sprint(nm.Considered)},
		{Type: CauseProxiesAtCapacity, Message: fmt.Sprint(nm.AtCapacity)},
		{Type: CauseProxiesInCooldown, Message: fmt.Sprint(nm.InCooldown)},
		{Type: CauseProxiesUnhealthy, Message: fmt.Sprint(nm.Unhealthy)},
		{Type: CauseProxiesFree, Message: fmt.Sprint(nm.Free)},
		{Type: CauseRequestsQueuedAhead, Message: fmt.Sprint(ahead)},
	}
	if nm.Site != nil {
		causes = append(causes, metav1.StatusCause{Type: CauseSitePolicy, Message: nm.Site.Policy})
	}
	if nm.Tier > 0 {
		causes = append(causes, metav1.StatusCause{Type: CauseLadderTier, Message: fmt.Sprint(nm.Tier)})
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    409,
		Reason:  metav1.StatusReasonConflict,
		Message: msg,
		Details: &metav1.StatusDetails{
			Group:  proxyLeaseResource.Group,
			Kind:   proxyLeaseResource.Resource,
			Name:   pl.Name,
			Causes: causes,
		},
	}}
}

// selectorsString is a spec's selector, or its ladder of them.
func selectorsString(spec *leasingv1alpha1.ProxyLeaseSpec) string {
	if spec.Selectors == nil {
		return selectorString(spec.Selector)
	}
	parts := make([]string, len(spec.Selectors))
	for i, sel := range spec.Selectors {
		parts[i] = selectorString(sel)
	}
	return "ladder [" + strings.Join(parts, ", ") + "]"
}

func selectorString(sel map[string]string) string {
	if len(sel) == 0 {
		return "{}"
	}
	parts := make([]string, 0, len(sel))
	for k, v := range sel {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}
