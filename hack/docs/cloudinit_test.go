package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// The Compute Engine example's cloud-init writes the squid.conf rules the
// operator writes into its pods' (no --proxy-allowed-* flag): a VM refuses
// what a pod refuses.
func TestCloudInitExampleHasTheOperatorsSquidRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "artifacts", "examples", "fleet", "cloud-init-secret.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var secret struct {
		StringData struct {
			UserData string `json:"userData"`
		} `json:"stringData"`
	}
	if err := yaml.Unmarshal(data, &secret); err != nil {
		t.Fatal(err)
	}
	var cloudConfig struct {
		WriteFiles []struct{ Path, Content string } `json:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(secret.StringData.UserData), &cloudConfig); err != nil {
		t.Fatal(err)
	}
	var conf string
	for _, f := range cloudConfig.WriteFiles {
		if strings.HasPrefix(f.Path, "/etc/squid/") {
			conf = f.Content
		}
	}
	// The directives proxyauth.SquidAuthConfig writes.
	stanza := map[string]bool{"auth_param": true, "acl": true, "http_access": true, "cache_peer": true, "never_direct": true, "client_idle_pconn_timeout": true}
	lines := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if f := strings.Fields(l); len(f) > 0 && stanza[f[0]] {
				out = append(out, l)
			}
		}
		return out
	}
	want := lines(proxyauth.SquidAuthConfig("/usr/local/bin/proxy-auth-helper", "/etc/proxy-operator/auth.json", proxyauth.DefaultRelayAddr, proxyauth.Egress{}))
	if diff := cmp.Diff(want, lines(conf)); diff != "" {
		t.Errorf("the example's squid.conf rules differ from the operator's (-want +got):\n%s", diff)
	}
}
