package controller

import (
	"testing"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

func baseSpec() crawlv1alpha1.ProxySpec {
	return crawlv1alpha1.ProxySpec{
		Mode:       crawlv1alpha1.ModeManaged,
		Provider:   "gcp",
		Attributes: map[string]string{"region": "eu"},
		GCP: &crawlv1alpha1.GCPProviderSpec{
			Zone: "europe-west1-b", MachineType: "e2-small", Image: "debian-12",
			Labels: map[string]string{"a": "1", "b": "2", "c": "3"},
		},
	}
}

func TestSpecHash(t *testing.T) {
	base := baseSpec()
	baseHash := SpecHash(&base, "ci", nil)
	tests := []struct {
		name      string
		mutate    func(*crawlv1alpha1.ProxySpec)
		cloudInit string
		same      bool
	}{
		{"identical", func(*crawlv1alpha1.ProxySpec) {}, "ci", true},
		{"attributes are not provider input", func(s *crawlv1alpha1.ProxySpec) { s.Attributes["tier"] = "gold" }, "ci", true},
		{"health check is not provider input", func(s *crawlv1alpha1.ProxySpec) { s.HealthCheck.IntervalSeconds = 99 }, "ci", true},
		{"endpoint is not provider input", func(s *crawlv1alpha1.ProxySpec) { s.Endpoint = &crawlv1alpha1.Endpoint{Host: "x"} }, "ci", true},
		{"secret reference without content change", func(s *crawlv1alpha1.ProxySpec) {
			s.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "other"}}
		}, "ci", true},
		{"map order is irrelevant", func(s *crawlv1alpha1.ProxySpec) {
			s.GCP.Labels = map[string]string{"c": "3", "a": "1", "b": "2"}
		}, "ci", true},
		{"resolved cloud-init content", func(*crawlv1alpha1.ProxySpec) {}, "ci2", false},
		{"provider", func(s *crawlv1alpha1.ProxySpec) { s.Provider = "kubernetes" }, "ci", false},
		{"gcp zone", func(s *crawlv1alpha1.ProxySpec) { s.GCP.Zone = "europe-west1-c" }, "ci", false},
		{"gcp label", func(s *crawlv1alpha1.ProxySpec) { s.GCP.Labels["d"] = "4" }, "ci", false},
		{"gcp spot", func(s *crawlv1alpha1.ProxySpec) { s.GCP.Spot = true }, "ci", false},
		{"kubernetes block", func(s *crawlv1alpha1.ProxySpec) {
			s.Kubernetes = &crawlv1alpha1.KubernetesProviderSpec{Image: "squid:2"}
		}, "ci", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := baseSpec()
			tt.mutate(&s)
			got := SpecHash(&s, tt.cloudInit, nil)
			if (got == baseHash) != tt.same {
				t.Errorf("SpecHash same=%v, want same=%v", got == baseHash, tt.same)
			}
			if len(got) != 64 {
				t.Errorf("hash %q is not hex SHA-256", got)
			}
		})
	}
	if SpecHash(nil, "", nil) == "" {
		t.Error("nil spec hashes to empty")
	}
}
