package discovery

import (
	"maps"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// ProxyQuery is the parsed query of GET /v1/proxies.
type ProxyQuery struct {
	// Selector from attr.K=V parameters.
	Selector map[string]string
	// Healthy filters on the Healthy condition when set.
	Healthy *bool
	// Namespace filters when non-empty.
	Namespace string
}

// ParseProxyQuery parses the raw query of GET /v1/proxies:
// attr.K=V (any number, each K once), healthy=true|false, namespace=N.
// Anything else, a repeated parameter or a malformed query is a
// *RequestError with code invalid_query.
func ParseProxyQuery(rawQuery string) (ProxyQuery, error) {
	var q ProxyQuery
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		return q, badRequest(wire.CodeInvalidQuery, "malformed query: %v", err)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic error messages
	for _, key := range keys {
		vals := values[key]
		if len(vals) != 1 {
			return q, badRequest(wire.CodeInvalidQuery, "parameter %q given %d times, at most once allowed", key, len(vals))
		}
		v := vals[0]
		switch {
		case strings.HasPrefix(key, "attr."):
			name := strings.TrimPrefix(key, "attr.")
			if q.Selector == nil {
				q.Selector = map[string]string{}
			}
			q.Selector[name] = v
		case key == "healthy":
			switch v {
			case "true", "false":
				h := v == "true"
				q.Healthy = &h
			default:
				return q, badRequest(wire.CodeInvalidQuery, "healthy must be true or false, got %q", v)
			}
		case key == "namespace":
			if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
				return q, badRequest(wire.CodeInvalidQuery, "namespace %q: %s", v, strings.Join(errs, "; "))
			}
			q.Namespace = v
		default:
			return q, badRequest(wire.CodeInvalidQuery, "unknown parameter %q (want attr.<name>, healthy, namespace)", key)
		}
	}
	if errs := leasing.ValidateSelector(q.Selector, field.NewPath("attr")); len(errs) > 0 {
		return q, badRequest(wire.CodeInvalidQuery, "%s", errs.ToAggregate().Error())
	}
	return q, nil
}

// Encode renders q as a query string that ParseProxyQuery reads back as q.
func (q ProxyQuery) Encode() string {
	v := url.Values{}
	for k, val := range q.Selector {
		v.Set("attr."+k, val)
	}
	if q.Healthy != nil {
		if *q.Healthy {
			v.Set("healthy", "true")
		} else {
			v.Set("healthy", "false")
		}
	}
	if q.Namespace != "" {
		v.Set("namespace", q.Namespace)
	}
	return v.Encode()
}

// ParseLeaseQuery parses the raw query of GET /v1/leases/{id}: target=T at
// most once (T is checked as a lease's target is, by the Service). Anything
// else is a *RequestError with code invalid_query.
func ParseLeaseQuery(rawQuery string) (target string, err error) {
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", badRequest(wire.CodeInvalidQuery, "malformed query: %v", err)
	}
	for _, key := range slices.Sorted(maps.Keys(values)) { // deterministic error messages
		vals := values[key]
		if key != "target" {
			return "", badRequest(wire.CodeInvalidQuery, "unknown parameter %q (want target)", key)
		}
		if len(vals) != 1 {
			return "", badRequest(wire.CodeInvalidQuery, "parameter %q given %d times, at most once allowed", key, len(vals))
		}
		target = vals[0]
	}
	return target, nil
}
