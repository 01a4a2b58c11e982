package builders

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// ProxyPoolBuilder builds a ProxyPool.
type ProxyPoolBuilder struct{ p crawlv1alpha1.ProxyPool }

// ProxyPool starts a ProxyPool named name in namespace ns, with no replicas
// set (the API defaults them) and an empty template: Template says what its
// Proxies are.
func ProxyPool(ns, name string) *ProxyPoolBuilder {
	return &ProxyPoolBuilder{p: crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
}

// Obj is the ProxyPool built so far (a copy: the builder can go on).
func (b *ProxyPoolBuilder) Obj() *crawlv1alpha1.ProxyPool { return b.p.DeepCopy() }

// Replicas sets spec.replicas.
func (b *ProxyPoolBuilder) Replicas(n int32) *ProxyPoolBuilder {
	b.p.Spec.Replicas = ptr.To(n)
	return b
}

// Template makes the pool's Proxies like proxy: its labels and spec (its
// name and namespace are the pool's to choose).
func (b *ProxyPoolBuilder) Template(proxy *ProxyBuilder) *ProxyPoolBuilder {
	p := proxy.Obj()
	b.p.Spec.Template = crawlv1alpha1.ProxyTemplate{
		Metadata: crawlv1alpha1.TemplateMetadata{Labels: p.Labels},
		Spec:     p.Spec,
	}
	return b
}

// Autoscaling scales the pool between min and max replicas on its lease
// utilization.
func (b *ProxyPoolBuilder) Autoscaling(min, max int32) *ProxyPoolBuilder {
	if b.p.Spec.Autoscaling == nil {
		b.p.Spec.Autoscaling = &crawlv1alpha1.PoolAutoscaling{}
	}
	b.p.Spec.Autoscaling.MinReplicas = ptr.To(min)
	b.p.Spec.Autoscaling.MaxReplicas = max
	return b
}

// TargetUtilization sets the autoscaler's target percentage of leased
// capacity (after Autoscaling).
func (b *ProxyPoolBuilder) TargetUtilization(percent int32) *ProxyPoolBuilder {
	b.p.Spec.Autoscaling.TargetUtilization = ptr.To(percent)
	return b
}

// ScaleDownDelay sets how long utilization must stay low before the pool
// shrinks (after Autoscaling).
func (b *ProxyPoolBuilder) ScaleDownDelay(seconds int32) *ProxyPoolBuilder {
	b.p.Spec.Autoscaling.ScaleDownDelaySeconds = ptr.To(seconds)
	return b
}
