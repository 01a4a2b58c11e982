package lease

import (
	toolscache "k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// ProxyInfoFromProxy turns a Proxy into what the store needs. A proxy is
// offered (Healthy) only when its Healthy condition is True, it has an
// address, and it is not being deleted; it is Draining while its ProxyPool
// removes it (the crawl.example.com/draining annotation).
func ProxyInfoFromProxy(p *crawlv1alpha1.Proxy) ProxyInfo {
	host, port := p.Address()
	info := ProxyInfo{
		Namespace:  p.Namespace,
		Name:       p.Name,
		URL:        p.ProxyURL(),
		Host:       host,
		Port:       port,
		Attributes: p.Spec.Attributes,
		Healthy:    p.IsHealthy() && host != "" && p.DeletionTimestamp == nil,
		Draining:   p.Annotations[crawlv1alpha1.DrainingAnnotation] != "",
		External:   p.Spec.IsExternal(),
	}
	if p.Status.LatencyMillis != nil {
		info.LatencyMillis = *p.Status.LatencyMillis
	}
	return info
}

// Fleet is what ProxySync feeds: *Store implements it.
type Fleet interface {
	// UpsertProxy adds or updates one proxy; unchanged information is a no-op.
	UpsertProxy(ProxyInfo)
	// RemoveProxy takes a proxy out of the fleet; unknown keys are ignored.
	RemoveProxy(ProxyKey)
}

// ProxySync is an informer event handler for *crawlv1alpha1.Proxy that keeps
// a Fleet in step with the manager cache:
//
//	inf, err := mgr.GetCache().GetInformer(ctx, &crawlv1alpha1.Proxy{})
//	_, err = inf.AddEventHandler(lease.NewProxySync(store))
//
// Objects of other types are ignored.
type ProxySync struct {
	fleet Fleet
}

var _ toolscache.ResourceEventHandler = (*ProxySync)(nil)

// NewProxySync returns a handler feeding f.
func NewProxySync(f Fleet) *ProxySync { return &ProxySync{fleet: f} }

// OnAdd upserts the proxy.
func (h *ProxySync) OnAdd(obj any, _ bool) {
	if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
		h.fleet.UpsertProxy(ProxyInfoFromProxy(p))
	}
}

// OnUpdate upserts the new version.
func (h *ProxySync) OnUpdate(_, newObj any) {
	if p, ok := newObj.(*crawlv1alpha1.Proxy); ok {
		h.fleet.UpsertProxy(ProxyInfoFromProxy(p))
	}
}

// OnDelete removes the proxy, including when the informer only knows its
// final state as a tombstone.
func (h *ProxySync) OnDelete(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
		h.fleet.RemoveProxy(ProxyKey{Namespace: p.Namespace, Name: p.Name})
	}
}
