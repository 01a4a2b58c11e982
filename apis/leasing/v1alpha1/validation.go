package v1alpha1

import (
	"slices"
	"unicode"
	"unicode/utf8"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits on the sizes of a lease request; they keep one request from holding
// much memory in the server. Both lease APIs apply them (pkg/leasing's
// Request.Validate calls ValidateSelector and ValidateTarget), so a lease
// taken over HTTP is always a valid ProxyLease.
const (
	MaxSelectorEntries = 32
	// MaxSelectors is the most selectors a ladder (spec.selectors) lists.
	MaxSelectors      = 4
	MaxSelectorKeyLen = 253
	MaxSelectorValLen = 253
	MaxTargetLen      = 253
)

// ValidateProxyLease validates a ProxyLease as created: its shape. The
// server's limits (the longest TTL and wait) are the lease service's to
// check, so both lease APIs apply the same ones.
func ValidateProxyLease(l *ProxyLease) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&l.ObjectMeta, true,
		apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&l.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateProxyLeaseUpdate validates an update (a renewal). Only
// spec.ttlSeconds, labels and annotations may change.
func ValidateProxyLeaseUpdate(newL, oldL *ProxyLease) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newL.ObjectMeta, &oldL.ObjectMeta, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	allErrs = append(allErrs, validateTTL(newL.Spec.TTLSeconds, spec.Child("ttlSeconds"))...)
	if !mapsEqual(newL.Spec.Selector, oldL.Spec.Selector) {
		allErrs = append(allErrs, field.Forbidden(spec.Child("selector"), "field is immutable: create a new lease to change it"))
	}
	if !slices.EqualFunc(newL.Spec.Selectors, oldL.Spec.Selectors, mapsEqual) {
		allErrs = append(allErrs, field.Forbidden(spec.Child("selectors"), "field is immutable: create a new lease to change it"))
	}
	if newL.Spec.Target != oldL.Spec.Target {
		allErrs = append(allErrs, field.Invalid(spec.Child("target"), newL.Spec.Target, "field is immutable"))
	}
	if newL.Spec.Priority != oldL.Spec.Priority {
		allErrs = append(allErrs, field.Invalid(spec.Child("priority"), newL.Spec.Priority, "field is immutable"))
	}
	if newL.Spec.WaitSeconds != oldL.Spec.WaitSeconds {
		allErrs = append(allErrs, field.Invalid(spec.Child("waitSeconds"), newL.Spec.WaitSeconds, "field is immutable"))
	}
	return allErrs
}

// ValidateProxyLeaseReport validates a report.
func ValidateProxyLeaseReport(r *ProxyLeaseReport) field.ErrorList {
	var allErrs field.ErrorList
	switch r.Result {
	case ResultOK, ResultRateLimited, ResultBanned:
	case "":
		allErrs = append(allErrs, field.Required(field.NewPath("result"), "one of ok, rate_limited, banned"))
	default:
		allErrs = append(allErrs, field.NotSupported(field.NewPath("result"), r.Result,
			[]ReportResult{ResultOK, ResultRateLimited, ResultBanned}))
	}
	allErrs = append(allErrs, ValidateTarget(r.Target, field.NewPath("target"))...)
	return allErrs
}

func validateSpec(s *ProxyLeaseSpec, path *field.Path) field.ErrorList {
	allErrs := ValidateSelectors(s.Selector, s.Selectors, path)
	allErrs = append(allErrs, ValidateTarget(s.Target, path.Child("target"))...)
	allErrs = append(allErrs, validateTTL(s.TTLSeconds, path.Child("ttlSeconds"))...)
	wait := path.Child("waitSeconds")
	if s.WaitSeconds < 0 {
		allErrs = append(allErrs, field.Invalid(wait, s.WaitSeconds, "must be 0 or more"))
	}
	return allErrs
}

func validateTTL(ttl *int32, path *field.Path) field.ErrorList {
	switch {
	case ttl == nil:
		return field.ErrorList{field.Required(path, "")}
	case *ttl < 1:
		return field.ErrorList{field.Invalid(path, *ttl, "must be at least 1")}
	}
	return nil
}

// ValidateSelector checks a lease request's selector: at most
// MaxSelectorEntries pairs, each key non-empty, keys and values within their
// lengths, valid UTF-8 without control characters.
func ValidateSelector(sel map[string]string, path *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(sel) > MaxSelectorEntries {
		allErrs = append(allErrs, field.TooMany(path, len(sel), MaxSelectorEntries))
	}
	for k, v := range sel {
		switch {
		case k == "":
			allErrs = append(allErrs, field.Invalid(path, k, "attribute name must not be empty"))
		case len(k) > MaxSelectorKeyLen:
			allErrs = append(allErrs, field.TooLong(path, k, MaxSelectorKeyLen))
		case !printable(k):
			allErrs = append(allErrs, field.Invalid(path, k, "attribute name must be UTF-8 without control characters"))
		case len(v) > MaxSelectorValLen:
			allErrs = append(allErrs, field.TooLong(path.Key(k), v, MaxSelectorValLen))
		case !printable(v):
			allErrs = append(allErrs, field.Invalid(path.Key(k), v, "must be UTF-8 without control characters"))
		}
	}
	return allErrs
}

// ValidateSelectors checks a lease request's selector and its ladder
// (selectors, under path): at most one of the two, at most MaxSelectors
// tiers, each a valid selector.
func ValidateSelectors(sel map[string]string, ladder []map[string]string, path *field.Path) field.ErrorList {
	allErrs := ValidateSelector(sel, path.Child("selector"))
	lp := path.Child("selectors")
	switch {
	case ladder == nil:
		return allErrs
	case len(sel) > 0:
		return append(allErrs, field.Forbidden(lp, "selector and selectors are exclusive: put the selector first in selectors"))
	case len(ladder) == 0:
		return append(allErrs, field.Required(lp, "a ladder lists 1 to 4 selectors, cheapest first"))
	case len(ladder) > MaxSelectors:
		return append(allErrs, field.TooMany(lp, len(ladder), MaxSelectors))
	}
	for i, tier := range ladder {
		allErrs = append(allErrs, ValidateSelector(tier, lp.Index(i))...)
	}
	return allErrs
}

// ValidateTarget checks a lease request's or a report's target (a site,
// usually a host name): at most MaxTargetLen bytes of UTF-8, without spaces
// or control characters.
func ValidateTarget(t string, path *field.Path) field.ErrorList {
	if len(t) > MaxTargetLen {
		return field.ErrorList{field.TooLong(path, t, MaxTargetLen)}
	}
	if !utf8.ValidString(t) {
		return field.ErrorList{field.Invalid(path, t, "must be valid UTF-8")}
	}
	for _, r := range t {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return field.ErrorList{field.Invalid(path, t, "must not contain spaces or control characters")}
		}
	}
	return nil
}

// printable: valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
