package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	apiserverartifacts "github.com/proxy-operator/proxy-operator/artifacts/apiserver"
	"github.com/proxy-operator/proxy-operator/artifacts/operator"
	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/serving"
)

// tokenLease is what one POST /v1/leases with a bearer token came to: the
// status and, when granted, the holder and flow the store recorded.
type tokenLease struct {
	Status       int
	Holder, Flow string
}

// Tokens from --discovery-token-file reach the discovery server as Run wires
// it: each token authenticates as its own identity, so two crawlers get two
// holders and two flows; a token of no line is 401 and leases nothing.
func TestDiscoveryServerTellsTokensApart(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		requests []struct{ token, body string }
		want     []tokenLease
		// wantHeld: leases held per flow afterwards (store.HeldBy).
		wantHeld map[string]int
	}{
		{
			name: "two crawlers, two tokens",
			file: "# crawlers outside the cluster\ntoken-a,crawler-a\ntoken-b,crawler-b\n",
			requests: []struct{ token, body string }{
				{"token-a", `{}`},
				{"token-b", `{}`},
				{"token-b", `{"flow":"batch"}`},
				{"token-c", `{}`},           // on no line
				{"crawler-a", `{}`},         // an identity is not a token
				{"token-a,crawler-a", `{}`}, // nor is a whole line
				{"", `{}`},
			},
			want: []tokenLease{
				{Status: http.StatusCreated, Holder: "http:crawler-a", Flow: "http:crawler-a"},
				{Status: http.StatusCreated, Holder: "http:crawler-b", Flow: "http:crawler-b"},
				{Status: http.StatusCreated, Holder: "http:crawler-b", Flow: "http:crawler-b/batch"},
				{Status: http.StatusUnauthorized},
				{Status: http.StatusUnauthorized},
				{Status: http.StatusUnauthorized},
				{Status: http.StatusUnauthorized},
			},
			wantHeld: map[string]int{"http:crawler-a": 1, "http:crawler-b": 1, "http:crawler-b/batch": 1, "http:discovery": 0},
		},
		{
			// Negative control: a single bare token (make dev's file) is one
			// identity, so both "crawlers" share one holder and flow.
			name: "one bare token, one identity",
			file: "token-a\n",
			requests: []struct{ token, body string }{
				{"token-a", `{}`},
				{"token-a", `{}`},
				{"token-b", `{}`},
			},
			want: []tokenLease{
				{Status: http.StatusCreated, Holder: "http:discovery", Flow: "http:discovery"},
				{Status: http.StatusCreated, Holder: "http:discovery", Flow: "http:discovery"},
				{Status: http.StatusUnauthorized},
			},
			wantHeld: map[string]int{"http:discovery": 2, "http:crawler-a": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokenFile := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(tokenFile, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			o := discovery.DefaultServingOptions()
			o.TokenFile = tokenFile
			o.PlainHTTP = true // served by httptest below
			// The file wins: this token must be refused.
			tokens, err := o.Tokens(func(string) string { return "token-env" })
			if err != nil {
				t.Fatal(err)
			}
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			lo := leasing.DefaultOptions()
			store, err := lease.New(lo.StoreOptions(), clk)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				host := fmt.Sprintf("127.0.0.%d", i+2)
				store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: fmt.Sprintf("p%d", i), URL: "http://" + host + ":3128",
					Host: host, Port: 3128, Healthy: true})
			}
			l := leasing.NewWithStore(store, lo, clk)
			t.Cleanup(func() { _ = l.Shutdown(context.Background()) })
			svc, err := l.Service(leasing.APIHTTP, o.MaxWait, nil)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := o.NewServer(tokens, svc, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !srv.AuthEnabled() {
				t.Fatal("discovery server runs without authentication")
			}
			ts := httptest.NewServer(srv.Handler())
			t.Cleanup(ts.Close)

			var got []tokenLease
			for _, r := range slices.Concat(tt.requests, []struct{ token, body string }{{"token-env", `{}`}}) {
				got = append(got, postLeaseAs(t, ts.URL, r.token, r.body, store))
			}
			want := slices.Concat(tt.want, []tokenLease{{Status: http.StatusUnauthorized}})
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("leases by token (-want +got):\n%s", d)
			}
			held := map[string]int{}
			for flow := range tt.wantHeld {
				held[flow] = store.HeldBy(flow)
			}
			if d := cmp.Diff(tt.wantHeld, held); d != "" {
				t.Errorf("leases held per flow (-want +got):\n%s", d)
			}
		})
	}
}

// postLeaseAs sends POST /v1/leases with token ("" = no Authorization
// header) and looks the granted lease up in the store.
func postLeaseAs(t *testing.T, baseURL, token, body string, store *lease.Store) tokenLease {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, baseURL+"/v1/leases", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := tokenLease{Status: resp.StatusCode}
	switch resp.StatusCode {
	case http.StatusCreated:
		var l wire.Lease
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatalf("decoding the lease %s: %v", data, err)
		}
		sl, ok := store.Get(l.LeaseID)
		if !ok {
			t.Fatalf("lease %s granted over HTTP is not in the store", l.LeaseID)
		}
		out.Holder, out.Flow = sl.Holder, sl.Flow
	case http.StatusUnauthorized:
		var e wire.Error
		if err := json.Unmarshal(data, &e); err != nil || e.Error != "unauthorized" {
			t.Errorf("401 body %s, want error \"unauthorized\"", data)
		}
	}
	return out
}

// manifests are the objects of operator.yaml and apiservice.yaml this test
// looks at.
type manifests struct {
	deployment *appsv1.Deployment
	services   map[string]*corev1.Service // by name
	pdb        *policyv1.PodDisruptionBudget
}

func decodeManifests(t *testing.T, files ...string) manifests {
	t.Helper()
	m := manifests{services: map[string]*corev1.Service{}}
	for _, f := range files {
		for _, doc := range strings.Split(f, "\n---\n") {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("decoding a manifest: %v", err)
			}
			switch meta.Kind {
			case "Deployment":
				m.deployment = &appsv1.Deployment{}
				if err := yaml.UnmarshalStrict([]byte(doc), m.deployment); err != nil {
					t.Fatalf("decoding the Deployment: %v", err)
				}
			case "Service":
				var s corev1.Service
				if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
					t.Fatalf("decoding a Service: %v", err)
				}
				m.services[s.Name] = &s
			case "PodDisruptionBudget":
				m.pdb = &policyv1.PodDisruptionBudget{}
				if err := yaml.UnmarshalStrict([]byte(doc), m.pdb); err != nil {
					t.Fatalf("decoding the PodDisruptionBudget: %v", err)
				}
			}
		}
	}
	return m
}

func readManifest(t *testing.T, fsys interface{ ReadFile(string) ([]byte, error) }, name string) string {
	t.Helper()
	data, err := fsys.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// portOf returns the port of a host:port bind address.
func portOf(addr string) int32 {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return int32(n)
}

// leasingProblems lists what keeps the shipped manifests from running the
// lease servers as deployed: ports, Services, the Secret-mounted token and
// serving certificate, probes, leader election and a single replica.
func leasingProblems(t *testing.T, m manifests) []string {
	t.Helper()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	d := m.deployment
	if d == nil {
		return []string{"no Deployment"}
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		bad("replicas must be 2 (a leader serving leases and a standby)")
	}
	if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		bad("strategy must be a RollingUpdate with maxSurge 1 and maxUnavailable 0 (a new Ready pod before an old one goes: the leader's deletion hands over to a running standby)")
	}
	// A drain must be able to evict one of the two Ready pods.
	if p := m.pdb; p == nil {
		bad("no PodDisruptionBudget")
	} else if p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() != 1 || p.Spec.MaxUnavailable != nil {
		bad("PodDisruptionBudget must be minAvailable 1 (one of the two Ready replicas evictable at a time)")
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		return append(problems, "want exactly one container")
	}
	c := d.Spec.Template.Spec.Containers[0]
	o, err := parseInPod(t, d.Namespace, c.Args...)
	if err != nil {
		return append(problems, fmt.Sprintf("args %v: %v", c.Args, err))
	}
	if !o.Election.Enabled {
		bad("--leader-elect is off")
	}
	// The pod leaves the lease APIs' Services, then the last checkpoint.
	shutdown := o.Serving.StepOutWorstCase() + max(checkpoint.FinalWriteWorstCase, lastCheckpointWait)
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown {
		bad("terminationGracePeriodSeconds %v is not longer than stepping out of the Services and the last lease checkpoint may take (%s)", ptr.Deref(g, 30), shutdown)
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	wantPorts := map[string]int32{"discovery": portOf(o.Discovery.Addr), "apiserver": int32(o.APIServer.SecureServing.BindPort),
		"probes": portOf(o.HealthProbeAddr), "metrics": portOf(o.MetricsAddr)}
	if o.Gateway.Enabled() {
		wantPorts["gateway"] = portOf(o.Gateway.Addr)
		// The gateway leases through the discovery Service, which routes to
		// the replica that leads.
		if u, err := url.Parse(o.Gateway.LeaseAPIURL); err != nil || u.Port() != "8090" || !strings.HasPrefix(u.Hostname(), "proxy-operator-discovery.") {
			bad("--gateway-lease-api-url %q is not the discovery Service", o.Gateway.LeaseAPIURL)
		}
	}
	for name, want := range wantPorts {
		if got, ok := ports[name]; !ok || got != want {
			bad("container port %q = %d, want %d (from the args)", name, got, want)
		}
	}
	if wantPorts["discovery"] != 8090 || wantPorts["apiserver"] != 7443 {
		bad("discovery and aggregated API ports are %d and %d, want 8090 and 7443", wantPorts["discovery"], wantPorts["apiserver"])
	}
	resolve := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			return ports[p.StrVal]
		}
		return p.IntVal
	}
	// Ready means healthy, the standby included: the leases check (which
	// only the leader passes) is left out of the readiness probe.
	for probe, wantPath := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz?exclude=leases"} {
		if probe == nil || probe.HTTPGet == nil {
			bad("missing liveness or readiness probe (want %s)", wantPath)
			continue
		}
		if probe.HTTPGet.Path != wantPath || resolve(probe.HTTPGet.Port) != wantPorts["probes"] {
			bad("probe %s on port %d, want %s on the health port %d", probe.HTTPGet.Path, resolve(probe.HTTPGet.Port), wantPath, wantPorts["probes"])
		}
	}

	// Every file the args name comes from a Secret volume holding that key.
	secrets := map[string]*corev1.SecretVolumeSource{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret
		}
	}
	fromSecret := func(flag, file string) {
		if file == "" {
			bad("%s is not set", flag)
			return
		}
		for _, vm := range c.VolumeMounts {
			rel, ok := strings.CutPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/")
			if !ok {
				continue
			}
			s := secrets[vm.Name]
			if s == nil {
				bad("%s %s is mounted from volume %q, which is not a Secret", flag, file, vm.Name)
				return
			}
			if !vm.ReadOnly {
				bad("%s: mount %s is not readOnly", flag, vm.MountPath)
			}
			if len(s.Items) == 0 {
				if path.Base(rel) != rel {
					bad("%s %s: no Secret key %q", flag, file, rel)
				}
				return
			}
			for _, it := range s.Items {
				if it.Path == rel {
					return
				}
			}
			bad("%s %s: Secret %s projects no item at %q", flag, file, s.SecretName, rel)
			return
		}
		bad("%s %s is under no volume mount", flag, file)
	}
	switch {
	case o.Discovery.TokenFile != "":
		fromSecret("--discovery-token-file", o.Discovery.TokenFile)
	case o.Discovery.TokenSecret == "":
		bad("the discovery API has no bearer tokens: set --discovery-token-secret (or --discovery-token-file)")
	}
	if !o.Checkpoint.Enabled() {
		bad("no --lease-checkpoint-secret: a restart would drop every lease and cooldown")
	}
	if !o.LeaseIDs.Enabled() {
		bad("no --lease-signing-secret: a crash would lose the leases granted since the last checkpoint")
	}
	if o.Discovery.PlainHTTP {
		bad("the discovery API serves plain HTTP (--discovery-plain-http)")
	}
	for flag, file := range map[string]string{"--discovery-tls-cert-file": o.Discovery.TLSCertFile, "--discovery-tls-private-key-file": o.Discovery.TLSKeyFile} {
		if file != "" {
			fromSecret(flag, file)
		}
	}
	switch cert := o.APIServer.SecureServing.ServerCert.CertKey; {
	case cert.CertFile != "" || cert.KeyFile != "":
		fromSecret("--apiserver-tls-cert-file", cert.CertFile)
		fromSecret("--apiserver-tls-private-key-file", cert.KeyFile)
	case !o.Certs.Enabled():
		bad("the aggregated API would serve a self-signed certificate no caBundle names: set --serving-cert-secret (or --apiserver-tls-cert-file)")
	}

	// Every Service reaches the pod: its selector is among the pod's labels,
	// and the serving label (which the operator sets) selects the lease APIs'
	// Services only; their target ports are the container's.
	labels := d.Spec.Template.Labels
	podSelector, err := k8slabels.Parse(o.Serving.PodSelector)
	if err != nil || !podSelector.Matches(k8slabels.Set(labels)) {
		bad("--serving-pod-selector %q does not select the pod's labels %v", o.Serving.PodSelector, labels)
	}
	discoverySvc := false
	for name, s := range m.services {
		if len(s.Spec.Selector) == 0 {
			bad("Service %s selects nothing", name)
		}
		for k, v := range s.Spec.Selector {
			if k == serving.LabelKey && v == serving.LabelValue {
				continue
			}
			if labels[k] != v {
				bad("Service %s selects %s=%s, which the pod does not carry", name, k, v)
			}
		}
		leaseAPI := false
		for _, p := range s.Spec.Ports {
			target := resolve(p.TargetPort)
			switch {
			case name == o.APIServer.ServiceName:
				leaseAPI = true
				if target != wantPorts["apiserver"] {
					bad("Service %s targets %d, want the aggregated API port %d", name, target, wantPorts["apiserver"])
				}
			case target == wantPorts["discovery"]:
				leaseAPI = true
				discoverySvc = p.Port == 8090
			case target == wantPorts["metrics"]:
				// The metrics Service (what a ServiceMonitor selects).
			case o.Gateway.Enabled() && target == wantPorts["gateway"]:
				// The gateway, on every replica.
			default:
				bad("Service %s port %s targets %d, no lease server", name, p.Name, target)
			}
		}
		if leaseAPI && !s.Spec.PublishNotReadyAddresses {
			bad("Service %s does not publish not-ready addresses: the leader's pod loses its endpoint when deleted, before its successor is labelled, and the APIService turns unavailable", name)
		}
		if selected := s.Spec.Selector[serving.LabelKey] == serving.LabelValue; selected != leaseAPI {
			if leaseAPI {
				bad("Service %s does not select %s=%s: a standby's 503s would answer half of the lease requests", name, serving.LabelKey, serving.LabelValue)
			} else {
				bad("Service %s selects %s=%s: it serves on every replica", name, serving.LabelKey, serving.LabelValue)
			}
		}
	}
	if _, ok := m.services[o.APIServer.ServiceName]; !ok {
		bad("no Service %s for the APIService", o.APIServer.ServiceName)
	}
	if !discoverySvc {
		bad("no Service exposes the discovery API on 8090")
	}
	return problems
}

// The shipped Deployment runs the lease servers as a cluster needs them.
// Each mutation breaks one requirement and must be caught (negative
// controls).
func TestOperatorManifestLeasing(t *testing.T) {
	operatorYAML := readManifest(t, operator.FS, "operator.yaml")
	apiserviceYAML := readManifest(t, apiserverartifacts.FS, "apiservice.yaml")
	tests := []struct {
		name     string
		old, new string // replaced once in operator.yaml ("" = as shipped)
		want     string // a problem mentioning this; "" = none
	}{
		{name: "as shipped"},
		{name: "one replica", old: "replicas: 2", new: "replicas: 1", want: "replicas must be 2"},
		{name: "no surge (a rollout that stalls)", old: "maxSurge: 1", new: "maxSurge: 0", want: "maxSurge 1"},
		{name: "a PodDisruptionBudget that blocks every drain", old: "minAvailable: 1", new: "minAvailable: 2", want: "minAvailable 1"},
		{name: "a grace period the last checkpoint outlasts", old: "terminationGracePeriodSeconds: 180", new: "terminationGracePeriodSeconds: 150",
			want: "terminationGracePeriodSeconds 150 is not longer"},
		{name: "readiness that waits for the leadership", old: "path: /readyz?exclude=leases", new: "path: /readyz", want: "want /readyz?exclude=leases"},
		{name: "discovery Service on every replica", old: "    app.kubernetes.io/name: proxy-operator\n    leasing.crawl.example.com/serving: \"true\"\n  ports:\n    - name: discovery",
			new: "    app.kubernetes.io/name: proxy-operator\n  ports:\n    - name: discovery", want: "does not select leasing.crawl.example.com/serving"},
		{name: "discovery Service routing by readiness", old: "  publishNotReadyAddresses: true\n  selector:\n    app.kubernetes.io/name: proxy-operator\n    leasing.crawl.example.com/serving: \"true\"\n  ports:\n    - name: discovery",
			new: "  selector:\n    app.kubernetes.io/name: proxy-operator\n    leasing.crawl.example.com/serving: \"true\"\n  ports:\n    - name: discovery", want: "does not publish not-ready addresses"},
		{name: "no leader election", old: "            - --leader-elect\n", new: "", want: "--leader-elect is off"},
		{name: "unnamed discovery port", old: "name: discovery\n              containerPort: 8090", new: "name: lease-http\n              containerPort: 8090",
			want: `container port "discovery"`},
		{name: "no tokens", old: "            - --discovery-token-secret=proxy-operator-discovery-token\n", new: "",
			want: "the discovery API has no bearer tokens"},
		{name: "plain HTTP", old: "            - --discovery-token-secret=proxy-operator-discovery-token\n",
			new:  "            - --discovery-token-secret=proxy-operator-discovery-token\n            - --discovery-plain-http\n",
			want: "serves plain HTTP"},
		{name: "no checkpoint", old: "            - --lease-checkpoint-secret=proxy-operator-leases\n", new: "",
			want: "a restart would drop every lease"},
		{name: "unsigned lease IDs", old: "            - --lease-signing-secret=proxy-operator-lease-key\n", new: "",
			want: "a crash would lose the leases granted"},
		{name: "no serving certificate", old: "            - --serving-cert-secret=proxy-operator-serving-cert\n", new: "",
			want: "the HTTP discovery API serves TLS"},
		{name: "own certificate outside any Secret", old: "            - --apiserver-secure-port=7443\n",
			new:  "            - --apiserver-secure-port=7443\n            - --apiserver-tls-cert-file=/elsewhere/tls.crt\n            - --apiserver-tls-private-key-file=/elsewhere/tls.key\n",
			want: "--apiserver-tls-cert-file /elsewhere/tls.crt is under no volume mount"},
		{name: "pod label the APIService's Service selects dropped", old: "        app.kubernetes.io/name: proxy-operator\n    spec:",
			new: "        app: proxy-operator\n    spec:", want: "which the pod does not carry"},
		{name: "readiness on the wrong port", old: "path: /readyz?exclude=leases\n              port: probes", new: "path: /readyz?exclude=leases\n              port: discovery",
			want: "on the health port"},
		{name: "no discovery Service", old: "      port: 8090\n      targetPort: discovery", new: "      port: 80\n      targetPort: discovery",
			want: "no Service exposes the discovery API"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := operatorYAML
			if tt.old != "" {
				if !strings.Contains(y, tt.old) {
					t.Fatalf("operator.yaml no longer contains %q; update the mutation", tt.old)
				}
				y = strings.Replace(y, tt.old, tt.new, 1)
			}
			problems := leasingProblems(t, decodeManifests(t, y, apiserviceYAML))
			if tt.want == "" {
				if len(problems) != 0 {
					t.Errorf("problems:\n%s", strings.Join(problems, "\n"))
				}
				return
			}
			if !strings.Contains(strings.Join(problems, "\n"), tt.want) {
				t.Errorf("problems %q do not mention %q", problems, tt.want)
			}
		})
	}
}
