package provider_test

import (
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

func TestCreateRequestValidate(t *testing.T) {
	valid := provider.CreateRequest{Name: provider.NameFromUID("u1"), Tag: provider.DefaultTag, OwnerUID: "u1"}
	tests := []struct {
		name      string
		mutate    func(r *provider.CreateRequest)
		wantField string // "" = valid
	}{
		{"valid", func(*provider.CreateRequest) {}, ""},
		{"63-character name", func(r *provider.CreateRequest) { r.Name = "p" + strings.Repeat("a", 62) }, ""},
		{"empty name", func(r *provider.CreateRequest) { r.Name = "" }, "createRequest.name"},
		{"64-character name", func(r *provider.CreateRequest) { r.Name = "p" + strings.Repeat("a", 63) }, "createRequest.name"},
		{"uppercase", func(r *provider.CreateRequest) { r.Name = "Proxy" }, "createRequest.name"},
		{"trailing dash", func(r *provider.CreateRequest) { r.Name = "proxy-" }, "createRequest.name"},
		{"underscore", func(r *provider.CreateRequest) { r.Name = "proxy_a" }, "createRequest.name"},
		{"empty tag", func(r *provider.CreateRequest) { r.Tag = "" }, "createRequest.tag"},
		{"empty owner", func(r *provider.CreateRequest) { r.OwnerUID = "" }, "createRequest.ownerUID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := valid
			tc.mutate(&req)
			err := req.Validate()
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !provider.IsPermanent(err) {
				t.Fatalf("Validate() = %v, want an ErrPermanent-class error", err)
			}
			if !strings.Contains(err.Error(), tc.wantField+":") && !strings.Contains(err.Error(), tc.wantField+" ") {
				t.Errorf("Validate() = %q, want it to name %s", err, tc.wantField)
			}
		})
	}
}

func TestInstanceStateKnown(t *testing.T) {
	for _, s := range provider.States() {
		if !s.Known() {
			t.Errorf("%q.Known() = false", s)
		}
	}
	if len(provider.States()) != 4 {
		t.Errorf("States() = %v, want the 4 states of the contract", provider.States())
	}
	for _, s := range []provider.InstanceState{"", "running", "RUNNING", "Stopping"} {
		if s.Known() {
			t.Errorf("%q.Known() = true, want false", s)
		}
	}
}
