package apiserver

import (
	"flag"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	_ "sigs.k8s.io/controller-runtime/pkg/client/config" // registers --kubeconfig on the Go flag set, as in the operator

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

func TestSchemeServesWithoutConversionFunctions(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	codecs := newCodecs(scheme)
	in := []byte(`{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLease",
		"metadata":{"name":"l","namespace":"ns"},"spec":{"target":"example.com"}}`)
	// What the server does with a request body: decode to the internal hub
	// version, defaulting on the way.
	obj, gvk, err := codecs.UniversalDecoder(leasingv1alpha1.InternalGroupVersion).Decode(in, nil, nil)
	if err != nil {
		t.Fatalf("decoding to the internal version: %v", err)
	}
	pl, ok := obj.(*leasingv1alpha1.ProxyLease)
	if !ok || gvk.Version != "v1alpha1" {
		t.Fatalf("decoded %T as %v", obj, gvk)
	}
	if pl.Spec.TTLSeconds == nil || *pl.Spec.TTLSeconds != leasingv1alpha1.DefaultTTLSeconds {
		t.Errorf("ttlSeconds not defaulted on decode: %v", pl.Spec.TTLSeconds)
	}
	// And back out as v1alpha1.
	out, err := runtime.Encode(codecs.LegacyCodec(leasingv1alpha1.SchemeGroupVersion), pl)
	if err != nil {
		t.Fatalf("encoding to v1alpha1: %v", err)
	}
	if !strings.Contains(string(out), `"apiVersion":"leasing.crawl.example.com/v1alpha1"`) || !strings.Contains(string(out), `"ttlSeconds":300`) {
		t.Errorf("encoded %s", out)
	}
	// Negative control: a scheme without the internal registration cannot
	// decode to the internal version.
	external := runtime.NewScheme()
	if err := leasingv1alpha1.AddToScheme(external); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newCodecs(external).UniversalDecoder(leasingv1alpha1.InternalGroupVersion).Decode(in, nil, nil); err == nil {
		t.Error("decoded to the internal version without registering it")
	}
}

func TestOpenAPINamerSchemeHasNoInternalVersion(t *testing.T) {
	s, err := newOpenAPINamerScheme()
	if err != nil {
		t.Fatal(err)
	}
	if s.Recognizes(schema.GroupVersionKind{Group: leasingv1alpha1.GroupName, Version: runtime.APIVersionInternal, Kind: "ProxyLease"}) {
		t.Error("the OpenAPI namer scheme knows the internal version: x-kubernetes-group-version-kind would list it")
	}
	if !s.Recognizes(leasingv1alpha1.SchemeGroupVersion.WithKind("ProxyLease")) {
		t.Error("the OpenAPI namer scheme lacks v1alpha1")
	}
}

func TestFlagsArePrefixedAndLiveBesideControllerRuntime(t *testing.T) {
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	fs.AddGoFlagSet(flag.CommandLine) // controller-runtime's --kubeconfig
	if fs.Lookup("kubeconfig") == nil {
		t.Fatal("controller-runtime's --kubeconfig is not registered; the test would prove nothing")
	}
	o := NewOptions()
	fs.AddFlagSet(o.FlagSet()) // a clash would panic here
	var ours []string
	o.FlagSet().VisitAll(func(f *pflag.Flag) { ours = append(ours, f.Name) })
	if len(ours) < 10 {
		t.Fatalf("only %d flags: %v", len(ours), ours)
	}
	for _, name := range ours {
		if !strings.HasPrefix(name, FlagPrefix) {
			t.Errorf("flag --%s lacks the %q prefix", name, FlagPrefix)
		}
	}
	err := fs.Parse([]string{
		"--kubeconfig=/k", "--apiserver-secure-port=9999", "--apiserver-authentication-kubeconfig=/a",
		"--apiserver-tls-cert-file=/c", "--apiserver-max-wait=10s",
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.SecureServing.BindPort != 9999 || o.Authentication.RemoteKubeConfigFile != "/a" ||
		o.SecureServing.ServerCert.CertKey.CertFile != "/c" || o.MaxWait.Seconds() != 10 {
		t.Errorf("parsed into %+v / %+v", o.SecureServing.SecureServingOptions, o.Authentication)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestOptionsDefaultsAndValidation(t *testing.T) {
	o := NewOptions()
	if o.SecureServing.BindPort != DefaultSecurePort || o.SecureServing.BindPort == 443 || !o.Enabled() {
		t.Errorf("default port %d, enabled %v", o.SecureServing.BindPort, o.Enabled())
	}
	if o.SecureServing.ServerCert.CertDirectory != "" {
		t.Error("a generated certificate would be written to disk")
	}
	o.SecureServing.BindPort = 0
	if o.Enabled() {
		t.Error("port 0 does not disable the server")
	}
	bad := NewOptions()
	bad.MaxWait = -1
	bad.WatchHistory = 0
	bad.ServiceName = ""
	err := bad.Validate()
	for _, want := range []string{"max-wait", "watch-history", "service-name"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validation error %v does not name %s", err, want)
		}
	}
}

func TestNewRequiresAService(t *testing.T) {
	if _, err := New(NewOptions(), Deps{}); err == nil || !strings.Contains(err.Error(), "Service") {
		t.Errorf("New without a service: %v", err)
	}
}
