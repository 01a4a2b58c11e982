package builders

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

func TestProxy(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  *crawlv1alpha1.Proxy
		want crawlv1alpha1.ProxySpec
	}{
		{"managed", Proxy("ns", "p").Managed("fake").Attr("region", "local").Obj(), crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: "fake", Attributes: map[string]crawlv1alpha1.AttributeValue{"region": "local"}}},
		{"external", Proxy("ns", "p").External("127.0.0.1", 3128).Probe("http://o/", 5, 3).FailureThreshold(5).Obj(), crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeExternal, Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: 3128},
			HealthCheck: crawlv1alpha1.HealthCheck{URL: "http://o/", IntervalSeconds: 5, TimeoutSeconds: 3, FailureThreshold: 5}}},
		{"gcp", Proxy("ns", "p").GCP("z-a", "e2-small").Project("pr").Obj(), crawlv1alpha1.ProxySpec{
			Provider: "gcp", Attributes: map[string]crawlv1alpha1.AttributeValue{"zone": "z-a"},
			GCP: &crawlv1alpha1.GCPProviderSpec{Project: "pr", Zone: "z-a", MachineType: "e2-small", Image: DebianImage}}},
		{"gcp without attributes", Proxy("ns", "p").GCP("z-a", "e2-small").NoAttrs().Obj(), crawlv1alpha1.ProxySpec{
			Provider: "gcp", GCP: &crawlv1alpha1.GCPProviderSpec{Zone: "z-a", MachineType: "e2-small", Image: DebianImage}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got.Namespace != "ns" || tc.got.Name != "p" {
				t.Errorf("object %s/%s, want ns/p", tc.got.Namespace, tc.got.Name)
			}
			if d := cmp.Diff(tc.want, tc.got.Spec); d != "" {
				t.Errorf("spec (-want +got):\n%s", d)
			}
		})
	}
}

// Obj is a copy: what the builder sets afterwards, or the test changes in
// the object, reaches neither the other.
func TestObjIsACopy(t *testing.T) {
	b := Proxy("ns", "p").Attr("a", "1").Label("l", "1").Finalizer("f")
	first := b.Obj()
	first.Spec.Attributes["a"] = "changed"
	first.Labels["l"] = "changed"
	second := b.Attr("b", "2").Obj()
	if d := cmp.Diff(map[string]crawlv1alpha1.AttributeValue{"a": "1", "b": "2"}, second.Spec.Attributes); d != "" {
		t.Errorf("attributes (-want +got):\n%s", d)
	}
	if second.Labels["l"] != "1" || len(second.Finalizers) != 1 {
		t.Errorf("labels %v, finalizers %v: want l=1 and one finalizer", second.Labels, second.Finalizers)
	}
	if _, ok := first.Spec.Attributes["b"]; ok {
		t.Error("an attribute set after Obj reached the earlier object")
	}
}

func TestProxyPool(t *testing.T) {
	got := ProxyPool("ns", "pool").Replicas(2).
		Template(Proxy("", "").Managed("kubernetes").Label("team", "crawl").Attr("pool", "pool")).
		Autoscaling(1, 5).TargetUtilization(80).ScaleDownDelay(60).Obj()
	want := crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool"},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To[int32](2),
			Template: crawlv1alpha1.ProxyTemplate{
				Metadata: crawlv1alpha1.TemplateMetadata{Labels: map[string]string{"team": "crawl"}},
				Spec: crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: "kubernetes",
					Attributes: map[string]crawlv1alpha1.AttributeValue{"pool": "pool"}},
			},
			Autoscaling: &crawlv1alpha1.PoolAutoscaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 5,
				TargetUtilization: ptr.To[int32](80), ScaleDownDelaySeconds: ptr.To[int32](60)},
		},
	}
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("ProxyPool (-want +got):\n%s", diff)
	}
	// Obj is a copy: building on does not change what was returned.
	b := ProxyPool("ns", "p").Replicas(1)
	first := b.Obj()
	b.Replicas(3)
	if *first.Spec.Replicas != 1 {
		t.Errorf("Obj shares the builder's state: replicas %d after the builder moved on", *first.Spec.Replicas)
	}
}
