package app

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

func TestLeasingFlags(t *testing.T) {
	o, err := parseInPod(t, "crawl", "--discovery-bind-address=127.0.0.1:9090", "--discovery-token-file=/run/token",
		"--discovery-tls-cert-file=/run/tls.crt", "--discovery-tls-private-key-file=/run/tls.key",
		"--max-leases-per-proxy=3", "--max-lease-ttl=2h", "--default-lease-ttl=10m", "--cooldown-window=90s",
		"--lease-max-cooldowns-per-holder=50", "--lease-max-ended-per-holder=500", "--lease-max-priority=token:crawler-a=10,group:ops=5", "--lease-max-priority=user:alice=3",
		"--lease-queue-max-per-identity=50",
		"--lease-queue-max-per-flow=2", "--lease-queue-max-per-band=20", "--lease-queue-max=200",
		"--apiserver-secure-port=0")
	if err != nil {
		t.Fatal(err)
	}
	want := leasing.Options{
		MaxLeasesPerProxy: 3, MaxLeaseTTL: 2 * time.Hour, DefaultLeaseTTL: 10 * time.Minute, CooldownWindow: 90 * time.Second,
		SweepInterval: lease.DefaultSweepInterval, MaxCooldownsPerHolder: 50, MaxEndedPerHolder: 500, QueueMaxPerFlow: 2, QueueMaxPerBand: 20, QueueMax: 200,
		QueueRetryAfter: time.Second, QueueMaxPerIdentity: 50,
		MaxPriority: leasing.PriorityGrants{"token:crawler-a": 10, "group:ops": 5, "user:alice": 3},
	}
	if d := cmp.Diff(want, o.Leasing); d != "" {
		t.Errorf("leasing options (-want +got):\n%s", d)
	}
	wantDiscovery := discovery.ServingOptions{Addr: "127.0.0.1:9090", TokenFile: "/run/token", MaxWait: discovery.DefaultMaxWait,
		TLSCertFile: "/run/tls.crt", TLSKeyFile: "/run/tls.key", KubernetesTokens: true}
	if d := cmp.Diff(wantDiscovery, o.Discovery); d != "" {
		t.Errorf("discovery options (-want +got):\n%s", d)
	}
	if o.APIServer.Enabled() {
		t.Error("--apiserver-secure-port=0 left the aggregated API server enabled")
	}
}

// The aggregated API server's flags come from its own flag set, prefixed,
// next to controller-runtime's --kubeconfig without clashing.
func TestAPIServerFlagsDoNotClash(t *testing.T) {
	o, err := parseDev(t, "--kubeconfig=/dev/null", "--apiserver-secure-port=7555",
		"--apiserver-authentication-kubeconfig=/tmp/authn", "--apiserver-max-wait=20s")
	if err != nil {
		t.Fatal(err)
	}
	got := []any{o.APIServer.SecureServing.BindPort, o.APIServer.Authentication.RemoteKubeConfigFile, o.APIServer.MaxWait}
	if d := cmp.Diff([]any{7555, "/tmp/authn", 20 * time.Second}, got); d != "" {
		t.Errorf("apiserver options (-want +got):\n%s", d)
	}
	if _, err := parse(t, "--secure-port=7555"); err == nil {
		t.Error("unprefixed --secure-port accepted; the generic API server's flags must carry the apiserver- prefix")
	}
}

// Help texts name flags as this binary spells them: the generic API
// server's usages refer to its unprefixed flags (--cert-dir, --secure-port),
// which the operator does not have.
func TestFlagUsagesNameRegisteredFlags(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	ref := regexp.MustCompile(`--([a-z0-9][a-z0-9-]*[a-z0-9])`)
	var checked int
	fs.VisitAll(func(f *pflag.Flag) {
		for _, m := range ref.FindAllStringSubmatch(f.Usage, -1) {
			checked++
			if fs.Lookup(m[1]) == nil {
				t.Errorf("--%s help names --%s, which is not a flag of the operator", f.Name, m[1])
			}
		}
	})
	// Negative control: the check sees the references it must judge.
	if checked == 0 {
		t.Fatal("no flag help names another flag; the check matched nothing")
	}
	certFile := fs.Lookup(apiserver.FlagPrefix + "tls-cert-file")
	if certFile == nil {
		t.Fatal("no --apiserver-tls-cert-file")
	}
	for _, want := range []string{"--apiserver-cert-dir", "--apiserver-tls-private-key-file", "in memory"} {
		if !strings.Contains(certFile.Usage, want) {
			t.Errorf("--apiserver-tls-cert-file help %q does not mention %q", certFile.Usage, want)
		}
	}
}

func TestLeasingValidateReportsEveryProblem(t *testing.T) {
	_, err := parse(t, "--discovery-bind-address=nonsense", "--max-leases-per-proxy=0", "--max-lease-ttl=1m",
		"--default-lease-ttl=5m", "--cooldown-window=0s", "--lease-queue-max=0", "--apiserver-max-wait=2m")
	if err == nil {
		t.Fatal("invalid options accepted")
	}
	for _, want := range []string{"--discovery-bind-address", "--max-leases-per-proxy: must be at least 1",
		"--default-lease-ttl 5m0s exceeds --max-lease-ttl 1m0s", "--cooldown-window: must be positive",
		"--lease-queue-max: must be at least 1", "--apiserver-max-wait"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Negative control: the same flags with valid values pass.
	if _, err := parseInPod(t, "crawl", "--discovery-bind-address=0", "--max-leases-per-proxy=2", "--max-lease-ttl=1m",
		"--default-lease-ttl=30s", "--cooldown-window=1s", "--lease-queue-max=1", "--apiserver-max-wait=20s"); err != nil {
		t.Errorf("valid options rejected: %v", err)
	}
}
