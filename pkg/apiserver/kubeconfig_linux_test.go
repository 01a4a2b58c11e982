package apiserver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The delegation kubeconfig needs no writable file system: the operator's
// manifests give it a read-only root and no volume to write to. A version
// that writes the file under the temporary directory fails here, as it
// crash-looped on a real node.
func TestDelegationKubeconfigNeedsNoWritableFileSystem(t *testing.T) {
	sa := t.TempDir() // as the pod's service-account volume
	for _, f := range []string{"token", "ca.crt"} {
		if err := os.WriteFile(filepath.Join(sa, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", filepath.Join(sa, "absent")) // nowhere to write
	cfg := &rest.Config{
		Host:            "https://10.96.0.1:443",
		BearerTokenFile: filepath.Join(sa, "token"),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:     filepath.Join(sa, "ca.crt"),
			ServerName: "kubernetes.default.svc",
			CertData:   []byte("cert"),
			KeyData:    []byte("key"),
		},
		Impersonate: rest.ImpersonationConfig{UserName: "someone", Groups: []string{"g"}},
	}
	path, remove, err := delegationKubeconfig(cfg)
	if err != nil {
		t.Fatalf("delegationKubeconfig: %v", err)
	}
	type seen struct {
		Host, TokenFile, CAFile, ServerName, User string
		Groups                                    []string
		CertData, KeyData                         []byte
	}
	want := seen{cfg.Host, cfg.BearerTokenFile, cfg.CAFile, cfg.ServerName, "someone", []string{"g"}, cfg.CertData, cfg.KeyData}
	// Authentication and authorization each load it.
	for range 2 {
		got, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			t.Fatalf("loading %s: %v", path, err)
		}
		if d := cmp.Diff(want, seen{got.Host, got.BearerTokenFile, got.CAFile, got.ServerName, got.Impersonate.UserName,
			got.Impersonate.Groups, got.CertData, got.KeyData}); d != "" {
			t.Errorf("the loaded config differs from the manager's (-want +got):\n%s", d)
		}
	}
	remove()
	if _, err := os.ReadFile(path); err == nil {
		t.Errorf("%s is still readable after remove", path)
	}
}
