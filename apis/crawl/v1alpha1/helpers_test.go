package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestProxyURLAndAddress(t *testing.T) {
	tests := []struct {
		name     string
		proxy    *Proxy
		wantHost string
		wantPort int32
		wantURL  string
	}{
		{name: "nil proxy", proxy: nil, wantURL: ""},
		{
			name:     "managed with ip uses the squid port",
			proxy:    &Proxy{Spec: ProxySpec{Mode: ModeManaged, Provider: "kubernetes"}, Status: ProxyStatus{IP: "10.0.0.7"}},
			wantHost: "10.0.0.7", wantPort: ProxyPort, wantURL: "http://10.0.0.7:3128",
		},
		{
			name:     "empty mode counts as managed",
			proxy:    &Proxy{Status: ProxyStatus{IP: "127.0.0.5"}},
			wantHost: "127.0.0.5", wantPort: ProxyPort, wantURL: "http://127.0.0.5:3128",
		},
		{
			name:    "managed without ip has no url yet",
			proxy:   &Proxy{Spec: ProxySpec{Mode: ModeManaged, Provider: "gcp"}},
			wantURL: "",
		},
		{
			name:     "managed ipv6 is bracketed",
			proxy:    &Proxy{Spec: ProxySpec{Mode: ModeManaged}, Status: ProxyStatus{IP: "fd00::1"}},
			wantHost: "fd00::1", wantPort: ProxyPort, wantURL: "http://[fd00::1]:3128",
		},
		{
			name: "external uses the endpoint, not a stale status ip",
			proxy: &Proxy{
				Spec:   ProxySpec{Mode: ModeExternal, Endpoint: &Endpoint{Host: "proxy.example.net", Port: 8080}},
				Status: ProxyStatus{IP: "old.example.net"},
			},
			wantHost: "proxy.example.net", wantPort: 8080, wantURL: "http://proxy.example.net:8080",
		},
		{
			name:     "external without port defaults to the squid port",
			proxy:    &Proxy{Spec: ProxySpec{Mode: ModeExternal, Endpoint: &Endpoint{Host: "127.0.0.9"}}},
			wantHost: "127.0.0.9", wantPort: ProxyPort, wantURL: "http://127.0.0.9:3128",
		},
		{
			name:    "external without endpoint has no url",
			proxy:   &Proxy{Spec: ProxySpec{Mode: ModeExternal}, Status: ProxyStatus{IP: "10.0.0.1"}},
			wantURL: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, port := tt.proxy.Address()
			if host != tt.wantHost || port != tt.wantPort {
				t.Errorf("Address() = (%q, %d), want (%q, %d)", host, port, tt.wantHost, tt.wantPort)
			}
			if got := tt.proxy.ProxyURL(); got != tt.wantURL {
				t.Errorf("ProxyURL() = %q, want %q", got, tt.wantURL)
			}
		})
	}
}

func TestModePredicates(t *testing.T) {
	tests := []struct {
		name         string
		spec         *ProxySpec
		wantManaged  bool
		wantExternal bool
	}{
		{name: "nil", spec: nil},
		{name: "empty is managed", spec: &ProxySpec{}, wantManaged: true},
		{name: "managed", spec: &ProxySpec{Mode: ModeManaged}, wantManaged: true},
		{name: "external", spec: &ProxySpec{Mode: ModeExternal}, wantExternal: true},
		{name: "unknown is neither", spec: &ProxySpec{Mode: "Hybrid"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.spec.IsManaged(); got != tt.wantManaged {
				t.Errorf("IsManaged() = %v, want %v", got, tt.wantManaged)
			}
			if got := tt.spec.IsExternal(); got != tt.wantExternal {
				t.Errorf("IsExternal() = %v, want %v", got, tt.wantExternal)
			}
		})
	}
}

func TestConditions(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: "Test"}
	}
	tests := []struct {
		name            string
		proxy           *Proxy
		wantHealthy     bool
		wantProvisioned bool
		wantHealthyCond *metav1.Condition
	}{
		{name: "nil proxy", proxy: nil},
		{name: "no conditions", proxy: &Proxy{}},
		{
			name: "healthy true",
			proxy: &Proxy{Status: ProxyStatus{Conditions: []metav1.Condition{
				cond(ConditionProvisioned, metav1.ConditionTrue), cond(ConditionHealthy, metav1.ConditionTrue),
			}}},
			wantHealthy: true, wantProvisioned: true,
			wantHealthyCond: &metav1.Condition{Type: ConditionHealthy, Status: metav1.ConditionTrue, Reason: "Test"},
		},
		{
			name: "healthy false is not healthy",
			proxy: &Proxy{Status: ProxyStatus{Conditions: []metav1.Condition{
				cond(ConditionProvisioned, metav1.ConditionTrue), cond(ConditionHealthy, metav1.ConditionFalse),
			}}},
			wantProvisioned: true,
			wantHealthyCond: &metav1.Condition{Type: ConditionHealthy, Status: metav1.ConditionFalse, Reason: "Test"},
		},
		{
			name: "healthy unknown is not healthy",
			proxy: &Proxy{Status: ProxyStatus{Conditions: []metav1.Condition{
				cond(ConditionHealthy, metav1.ConditionUnknown),
			}}},
			wantHealthyCond: &metav1.Condition{Type: ConditionHealthy, Status: metav1.ConditionUnknown, Reason: "Test"},
		},
		{
			name: "another condition true does not make it healthy",
			proxy: &Proxy{Status: ProxyStatus{Conditions: []metav1.Condition{
				cond(ConditionProvisioned, metav1.ConditionTrue),
			}}},
			wantProvisioned: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.proxy.IsHealthy(); got != tt.wantHealthy {
				t.Errorf("IsHealthy() = %v, want %v", got, tt.wantHealthy)
			}
			if got := tt.proxy.IsProvisioned(); got != tt.wantProvisioned {
				t.Errorf("IsProvisioned() = %v, want %v", got, tt.wantProvisioned)
			}
			if diff := cmp.Diff(tt.wantHealthyCond, tt.proxy.Condition(ConditionHealthy)); diff != "" {
				t.Errorf("Condition(Healthy) mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthCheckWithDefaults(t *testing.T) {
	full := HealthCheck{
		URL:              DefaultHealthCheckURL,
		IntervalSeconds:  DefaultHealthCheckIntervalSeconds,
		TimeoutSeconds:   DefaultHealthCheckTimeoutSeconds,
		SuccessThreshold: DefaultHealthCheckSuccessThreshold,
		FailureThreshold: DefaultHealthCheckFailureThreshold,
		ExpectedStatus:   DefaultHealthCheckExpectedStatus,
	}
	tls := &HealthCheckTLS{ServerName: "example.org"}
	tests := []struct {
		name string
		in   HealthCheck
		want HealthCheck
	}{
		{name: "zero gets every default", in: HealthCheck{}, want: full},
		{
			name: "set fields are kept",
			in:   HealthCheck{URL: "https://example.org/x", IntervalSeconds: 10, ExpectedStatus: 204, TLS: tls},
			want: HealthCheck{
				URL: "https://example.org/x", IntervalSeconds: 10, TimeoutSeconds: DefaultHealthCheckTimeoutSeconds,
				SuccessThreshold: DefaultHealthCheckSuccessThreshold, FailureThreshold: DefaultHealthCheckFailureThreshold,
				ExpectedStatus: 204, TLS: tls,
			},
		},
		{name: "already defaulted is unchanged", in: full, want: full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.in.WithDefaults()); diff != "" {
				t.Errorf("WithDefaults() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSecretKeyRefKeyOrDefault(t *testing.T) {
	tests := []struct {
		name string
		ref  *SecretKeyRef
		want string
	}{
		{name: "nil", ref: nil, want: DefaultCloudInitSecretKey},
		{name: "unset", ref: &SecretKeyRef{Name: "s"}, want: "userData"},
		{name: "set", ref: &SecretKeyRef{Name: "s", Key: "cloud-config"}, want: "cloud-config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ref.KeyOrDefault(); got != tt.want {
				t.Errorf("KeyOrDefault() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAddToScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatalf("AddToScheme: %v", err)
	}
	for _, obj := range []runtime.Object{&Proxy{}, &ProxyList{}} {
		gvks, _, err := s.ObjectKinds(obj)
		if err != nil {
			t.Fatalf("ObjectKinds(%T): %v", obj, err)
		}
		if len(gvks) != 1 || gvks[0].GroupVersion() != SchemeGroupVersion {
			t.Errorf("ObjectKinds(%T) = %v, want one kind in %v", obj, gvks, SchemeGroupVersion)
		}
	}
	// Negative control: a scheme without the group does not know the type.
	if _, _, err := runtime.NewScheme().ObjectKinds(&Proxy{}); err == nil {
		t.Errorf("an empty scheme recognised Proxy")
	}
	if got, want := Resource("proxies").String(), "proxies.crawl.example.com"; got != want {
		t.Errorf("Resource(proxies) = %q, want %q", got, want)
	}
	if got, want := Kind("Proxy").String(), "Proxy.crawl.example.com"; got != want {
		t.Errorf("Kind(Proxy) = %q, want %q", got, want)
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	latency := int64(42)
	orig := &Proxy{
		Spec: ProxySpec{
			Attributes: map[string]string{"region": "eu"},
			CloudInit:  &CloudInit{SecretRef: &SecretKeyRef{Name: "s"}},
			GCP:        &GCPProviderSpec{Tags: []string{"a"}, Labels: map[string]string{"k": "v"}},
			HealthCheck: HealthCheck{
				TLS: &HealthCheckTLS{ServerName: "x"},
			},
		},
		Status: ProxyStatus{LatencyMillis: &latency, Conditions: []metav1.Condition{{Type: ConditionHealthy}}},
	}
	cp := orig.DeepCopy()
	if diff := cmp.Diff(orig, cp); diff != "" {
		t.Fatalf("DeepCopy differs (-orig +copy):\n%s", diff)
	}
	cp.Spec.Attributes["region"] = "us"
	cp.Spec.CloudInit.SecretRef.Name = "t"
	cp.Spec.GCP.Tags[0] = "b"
	cp.Spec.GCP.Labels["k"] = "w"
	cp.Spec.HealthCheck.TLS.ServerName = "y"
	*cp.Status.LatencyMillis = 7
	cp.Status.Conditions[0].Type = ConditionProvisioned
	want := &Proxy{
		Spec: ProxySpec{
			Attributes: map[string]string{"region": "eu"},
			CloudInit:  &CloudInit{SecretRef: &SecretKeyRef{Name: "s"}},
			GCP:        &GCPProviderSpec{Tags: []string{"a"}, Labels: map[string]string{"k": "v"}},
			HealthCheck: HealthCheck{
				TLS: &HealthCheckTLS{ServerName: "x"},
			},
		},
		Status: ProxyStatus{LatencyMillis: ptr(int64(42)), Conditions: []metav1.Condition{{Type: ConditionHealthy}}},
	}
	if diff := cmp.Diff(want, orig); diff != "" {
		t.Errorf("mutating the copy changed the original (-want +got):\n%s", diff)
	}
}

func ptr[T any](v T) *T { return &v }

func TestSelectorMatches(t *testing.T) {
	attrs := map[string]string{"region": "eu", "tier": "gold", "empty": ""}
	tests := []struct {
		name     string
		selector map[string]string
		want     bool
	}{
		{"nil selector takes any proxy", nil, true},
		{"one pair present", map[string]string{"region": "eu"}, true},
		{"every pair present", map[string]string{"region": "eu", "tier": "gold"}, true},
		{"a value differs", map[string]string{"region": "us"}, false},
		{"one of two differs", map[string]string{"region": "eu", "tier": "silver"}, false},
		{"a key is missing", map[string]string{"zone": "a"}, false},
		{"an empty value must be present", map[string]string{"empty": ""}, true},
		{"an empty value is not a missing key", map[string]string{"zone": ""}, false},
	}
	for _, tc := range tests {
		if got := SelectorMatches(tc.selector, attrs); got != tc.want {
			t.Errorf("%s: SelectorMatches(%v) = %v, want %v", tc.name, tc.selector, got, tc.want)
		}
	}
	if !SelectorMatches(nil, nil) || SelectorMatches(map[string]string{"a": "b"}, nil) {
		t.Error("a proxy without attributes: only the empty selector takes it")
	}
}
