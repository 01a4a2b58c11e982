package nodeagent

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestServiceEndpoints(t *testing.T) {
	ep := func(ip string, ready, serving, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}}
	}
	slices := []*discoveryv1.EndpointSlice{
		{Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](7443)}},
			Endpoints: []discoveryv1.Endpoint{ep("10.244.1.3", true, true, false), ep("10.244.2.2", false, true, true), ep("10.244.2.5", false, false, false), ep("10.244.1.2", true, true, false)}},
		{Ports: []discoveryv1.EndpointPort{{Name: ptr.To("metrics"), Port: ptr.To[int32](8080)}},
			Endpoints: []discoveryv1.Endpoint{ep("10.244.9.9", true, true, false)}},
		{Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](7443)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}}}, // no conditions: ready
	}
	ready, terminating := ServiceEndpoints(slices, "https")
	if diff := cmp.Diff([]string{"127.244.1.2:7443", "127.244.1.3:7443", "192.0.2.1:7443"}, ready); diff != "" {
		t.Errorf("ready (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"127.244.2.2:7443"}, terminating); diff != "" {
		t.Errorf("serving terminating (-want +got):\n%s", diff)
	}
}

func TestServiceNames(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "sys"}, Spec: corev1.ServiceSpec{ClusterIP: "127.96.0.10"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "sys"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "far", Namespace: "sys"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.4"}},
	} {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	p := &ServiceProxy{services: corelisters.NewServiceLister(idx)}
	for host, want := range map[string]string{"api.sys.svc": "127.96.0.10", "api.sys.svc.cluster.local.": "127.96.0.10", "api.other.svc": "", "api.sys": "", "ext.sys.svc": ""} {
		got, ok := p.Resolve(host)
		if want == "" && ok || want != "" && got != netip.MustParseAddr(want) {
			t.Errorf("Resolve(%q) = %v, %v; want %q", host, got, ok, want)
		}
	}
	want := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.96.0.10\tapi.sys.svc api.sys.svc.cluster.local\n"
	if diff := cmp.Diff(want, string(p.Hosts())); diff != "" {
		t.Errorf("Hosts (-want +got):\n%s", diff)
	}
}
