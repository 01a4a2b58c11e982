package certs

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestOptions(t *testing.T) {
	if o := DefaultOptions(); o.Enabled() || o.Validate() != nil {
		t.Fatalf("defaults: enabled %v, %v", o.Enabled(), o.Validate())
	}
	o := DefaultOptions()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--serving-cert-secret=serving", "--serving-cert-hosts=localhost,127.0.0.1", "--serving-cert-validity=48h"}); err != nil {
		t.Fatal(err)
	}
	o.Namespace = "ops"
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"proxy-lease-api.ops.svc", "proxy-lease-api", "proxy-lease-api.ops", "proxy-lease-api.ops.svc.cluster.local",
		"proxy-operator-discovery.ops.svc", "proxy-operator-discovery", "proxy-operator-discovery.ops", "proxy-operator-discovery.ops.svc.cluster.local",
		"localhost", "127.0.0.1",
	}
	if d := cmp.Diff(want, o.hosts(o.Namespace)); d != "" {
		t.Errorf("hosts (-want +got):\n%s", d)
	}
	if o.CertValidity != 48*time.Hour {
		t.Errorf("validity %s", o.CertValidity)
	}

	bad := DefaultOptions()
	bad.SecretName, bad.Namespace = "Not_A_Name", ""
	bad.Services = []string{"Bad.Service"}
	bad.Hosts = []string{"not a host"}
	bad.CertValidity, bad.ResyncInterval = 400*24*time.Hour, 0
	bad.CAValidity = 100 * 24 * time.Hour
	err := bad.Validate()
	if err == nil {
		t.Fatal("invalid options accepted")
	}
	for _, want := range []string{"--serving-cert-secret \"Not_A_Name\"", "namespace is unknown", "--serving-cert-services \"Bad.Service\"",
		"--serving-cert-hosts \"not a host\"", "--serving-cert-resync-interval: must be positive", "must not exceed --serving-cert-ca-validity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
