package builders

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// DebianImage is the Compute Engine image the tests' GCP Proxies boot.
const DebianImage = "projects/debian-cloud/global/images/family/debian-12"

// ProxyBuilder builds a Proxy.
type ProxyBuilder struct{ p crawlv1alpha1.Proxy }

// Proxy starts a Proxy named name in namespace ns, with no mode, provider or
// endpoint yet: one of Managed, External or GCP says what it is.
func Proxy(ns, name string) *ProxyBuilder {
	return &ProxyBuilder{p: crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
}

// Obj is the Proxy built so far (a copy: the builder can go on).
func (b *ProxyBuilder) Obj() *crawlv1alpha1.Proxy { return b.p.DeepCopy() }

// Managed makes it a Managed Proxy of provider.
func (b *ProxyBuilder) Managed(provider string) *ProxyBuilder {
	b.p.Spec.Mode = crawlv1alpha1.ModeManaged
	b.p.Spec.Provider = provider
	return b
}

// Provider sets the provider and nothing else (no mode: the API's default).
func (b *ProxyBuilder) Provider(provider string) *ProxyBuilder {
	b.p.Spec.Provider = provider
	return b
}

// External makes it an External Proxy at host:port.
func (b *ProxyBuilder) External(host string, port int32) *ProxyBuilder {
	b.p.Spec.Mode = crawlv1alpha1.ModeExternal
	b.p.Spec.Endpoint = &crawlv1alpha1.Endpoint{Host: host, Port: port}
	return b
}

// GCP makes it a Compute Engine VM of provider "gcp" in zone, of
// machineType, booting DebianImage, its zone also an attribute (the
// selectors the tests lease by).
func (b *ProxyBuilder) GCP(zone, machineType string) *ProxyBuilder {
	b.p.Spec.Provider = "gcp"
	b.p.Spec.GCP = &crawlv1alpha1.GCPProviderSpec{Zone: zone, MachineType: machineType, Image: DebianImage}
	return b.Attr("zone", zone)
}

// Project sets the Compute Engine project of a GCP Proxy.
func (b *ProxyBuilder) Project(project string) *ProxyBuilder {
	b.p.Spec.GCP.Project = project
	return b
}

// Attr sets attribute k to v.
func (b *ProxyBuilder) Attr(k, v string) *ProxyBuilder {
	if b.p.Spec.Attributes == nil {
		b.p.Spec.Attributes = map[string]crawlv1alpha1.AttributeValue{}
	}
	b.p.Spec.Attributes[k] = crawlv1alpha1.AttributeValue(v)
	return b
}

// NoAttrs drops every attribute (GCP sets the zone's).
func (b *ProxyBuilder) NoAttrs() *ProxyBuilder {
	b.p.Spec.Attributes = nil
	return b
}

// Probe has the health check fetch url through the proxy every interval
// seconds, each probe given timeout seconds (0: the API's default).
func (b *ProxyBuilder) Probe(url string, interval, timeout int32) *ProxyBuilder {
	b.p.Spec.HealthCheck.URL = url
	b.p.Spec.HealthCheck.IntervalSeconds = interval
	b.p.Spec.HealthCheck.TimeoutSeconds = timeout
	return b
}

// FailureThreshold sets how many failed probes make the Proxy unhealthy.
func (b *ProxyBuilder) FailureThreshold(n int32) *ProxyBuilder {
	b.p.Spec.HealthCheck.FailureThreshold = n
	return b
}

// CloudInit sets what the proxy's machine runs at boot.
func (b *ProxyBuilder) CloudInit(ci *crawlv1alpha1.CloudInit) *ProxyBuilder {
	b.p.Spec.CloudInit = ci
	return b
}

// Label sets label k to v.
func (b *ProxyBuilder) Label(k, v string) *ProxyBuilder {
	metav1.SetMetaDataLabel(&b.p.ObjectMeta, k, v)
	return b
}

// Finalizer adds finalizer f.
func (b *ProxyBuilder) Finalizer(f string) *ProxyBuilder {
	b.p.Finalizers = append(b.p.Finalizers, f)
	return b
}
