package v1alpha1

import (
	"net"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IsExternal reports whether the proxy runs outside the operator's control.
func (s *ProxySpec) IsExternal() bool {
	return s != nil && s.Mode == ModeExternal
}

// IsManaged reports whether the operator provisions the proxy. An empty mode
// counts as Managed, the CRD's default, so objects built in Go without the
// apiserver's defaulting behave the same.
func (s *ProxySpec) IsManaged() bool {
	return s != nil && (s.Mode == ModeManaged || s.Mode == "")
}

// Address returns where the proxy is reached: spec.endpoint for External
// proxies (the spec is the truth; status.ip may lag an edit), status.ip and
// ProxyPort for Managed ones. host is empty while a Managed proxy has no IP.
func (p *Proxy) Address() (host string, port int32) {
	if p == nil {
		return "", 0
	}
	if p.Spec.IsExternal() {
		if p.Spec.Endpoint == nil {
			return "", 0
		}
		port = p.Spec.Endpoint.Port
		if port == 0 {
			port = ProxyPort
		}
		return p.Spec.Endpoint.Host, port
	}
	if p.Status.IP == "" {
		return "", 0
	}
	return p.Status.IP, ProxyPort
}

// ProxyURL returns the URL crawlers configure as their HTTP proxy,
// "http://<ip or endpoint host>:<port>" (IPv6 hosts bracketed), or "" while
// the proxy has no address yet.
func (p *Proxy) ProxyURL() string {
	host, port := p.Address()
	if host == "" {
		return ""
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// Condition returns the status condition of the given type, or nil.
func (p *Proxy) Condition(condType string) *metav1.Condition {
	if p == nil {
		return nil
	}
	return meta.FindStatusCondition(p.Status.Conditions, condType)
}

// IsHealthy reports whether the Healthy condition is True and about the
// proxy's current address (status.probedURL).
func (p *Proxy) IsHealthy() bool {
	return p != nil && meta.IsStatusConditionTrue(p.Status.Conditions, ConditionHealthy) && p.HealthIsAboutThisAddress()
}

// HealthIsAboutThisAddress reports whether the Healthy condition, if any, was
// probed at the proxy's current URL (or by an operator that did not record
// where: status.probedURL empty).
func (p *Proxy) HealthIsAboutThisAddress() bool {
	return p.Status.ProbedURL == "" || p.Status.ProbedURL == p.ProxyURL()
}

// IsProvisioned reports whether the Provisioned condition is True.
func (p *Proxy) IsProvisioned() bool {
	return p != nil && meta.IsStatusConditionTrue(p.Status.Conditions, ConditionProvisioned)
}

// WithDefaults returns h with every zero field set to the CRD's default, for
// objects that did not pass through the apiserver (fake clients, unit tests).
// Fields already set are kept, even where the CRD would reject them.
func (h HealthCheck) WithDefaults() HealthCheck {
	if h.URL == "" {
		h.URL = DefaultHealthCheckURL
	}
	if h.IntervalSeconds == 0 {
		h.IntervalSeconds = DefaultHealthCheckIntervalSeconds
	}
	if h.TimeoutSeconds == 0 {
		h.TimeoutSeconds = DefaultHealthCheckTimeoutSeconds
	}
	if h.SuccessThreshold == 0 {
		h.SuccessThreshold = DefaultHealthCheckSuccessThreshold
	}
	if h.FailureThreshold == 0 {
		h.FailureThreshold = DefaultHealthCheckFailureThreshold
	}
	if h.ExpectedStatus == 0 {
		h.ExpectedStatus = DefaultHealthCheckExpectedStatus
	}
	return h
}

// KeyOrDefault returns the Secret key to read: key, or DefaultCloudInitSecretKey
// when it is unset.
func (r *SecretKeyRef) KeyOrDefault() string {
	if r == nil || r.Key == "" {
		return DefaultCloudInitSecretKey
	}
	return r.Key
}

// SelectorMatches reports whether a lease request's selector accepts a
// proxy of these attributes: every pair of the selector is among them
// (equality only; an empty selector accepts every proxy). The lease store,
// the HTTP proxy list and the ProxyPool autoscaler all decide with it, so
// that a pool grows for exactly the requests its proxies could serve.
func SelectorMatches(selector, attributes map[string]string) bool {
	for k, v := range selector {
		if got, ok := attributes[k]; !ok || got != v {
			return false
		}
	}
	return true
}
