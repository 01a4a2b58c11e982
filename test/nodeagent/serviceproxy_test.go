package nodeagent

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
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

// TestRefusals: a connection sent to an endpoint that does not listen, or to
// a Service without endpoints, is recorded; one that reaches its server is not.
func TestRefusals(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello"))
			_ = c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	_ = closed.Close()

	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	eps := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	service := func(name, ip string, port int) {
		t.Helper()
		if err := svcs.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sys"},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}); err != nil {
			t.Fatal(err)
		}
		if port == 0 {
			return
		}
		if err := eps.Add(&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Namespace: "sys", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			Ports:      []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port))}},
			Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	service("up", "127.96.0.10", up.Addr().(*net.TCPAddr).Port)
	service("gone", "127.96.0.11", closedPort)
	service("empty", "127.96.0.12", 0)
	p := &ServiceProxy{log: logr.Discard(), services: corelisters.NewServiceLister(svcs),
		slices: discoverylisters.NewEndpointSliceLister(eps), next: map[string]int{}}

	// connect reads what comes through a connection to addr, at most 5 bytes
	// (the pipe has no half-close to end a relay by).
	connect := func(addr string) string {
		client, server := net.Pipe()
		defer client.Close()
		go p.forward(context.Background(), server, addr)
		b, _ := io.ReadAll(io.LimitReader(client, 5))
		return string(b)
	}
	if got := connect("127.96.0.10:443"); got != "hello" {
		t.Errorf("through the Service with a listening endpoint: read %q, want hello", got)
	}
	connect("127.96.0.11:443")
	connect("127.96.0.12:443")
	got := p.Refusals()
	for i := range got {
		got[i].At, got[i].Err = time.Time{}, ""
	}
	want := []Refusal{{Service: "sys/gone", Endpoint: net.JoinHostPort("127.0.0.1", strconv.Itoa(closedPort))}, {Service: "sys/empty"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Refusals (-want +got):\n%s", diff)
	}
}
