package apiserver

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes cfg as a kubeconfig file in a new private directory
// and returns its path and a cleanup func. The delegating authentication and
// authorization options of k8s.io/apiserver only read a kubeconfig file (or
// the in-cluster config); this lets them use the manager's rest.Config. They
// read the file once, while the server is being built.
func writeKubeconfig(cfg *rest.Config) (string, func(), error) {
	dir, err := os.MkdirTemp("", "proxy-lease-api-")
	if err != nil {
		return "", nil, fmt.Errorf("creating a directory for the delegation kubeconfig: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfigFor(cfg), path); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("writing the delegation kubeconfig: %w", err)
	}
	return path, cleanup, nil
}

func kubeconfigFor(cfg *rest.Config) *clientcmdapi.Config {
	const name = "delegation"
	cluster := clientcmdapi.NewCluster()
	cluster.Server = cfg.Host
	cluster.CertificateAuthority = cfg.CAFile
	cluster.CertificateAuthorityData = cfg.CAData
	cluster.InsecureSkipTLSVerify = cfg.Insecure
	cluster.TLSServerName = cfg.ServerName

	auth := clientcmdapi.NewAuthInfo()
	auth.ClientCertificate = cfg.CertFile
	auth.ClientCertificateData = cfg.CertData
	auth.ClientKey = cfg.KeyFile
	auth.ClientKeyData = cfg.KeyData
	auth.Token = cfg.BearerToken
	auth.TokenFile = cfg.BearerTokenFile
	auth.Username = cfg.Username
	auth.Password = cfg.Password
	auth.Impersonate = cfg.Impersonate.UserName
	auth.ImpersonateUID = cfg.Impersonate.UID
	auth.ImpersonateGroups = cfg.Impersonate.Groups
	auth.ImpersonateUserExtra = cfg.Impersonate.Extra
	auth.Exec = cfg.ExecProvider
	auth.AuthProvider = cfg.AuthProvider

	ctx := clientcmdapi.NewContext()
	ctx.Cluster = name
	ctx.AuthInfo = name

	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = cluster
	kc.AuthInfos[name] = auth
	kc.Contexts[name] = ctx
	kc.CurrentContext = name
	return kc
}
