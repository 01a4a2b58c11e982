package apiserver

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// delegationKubeconfig serializes cfg as a kubeconfig and returns a path
// where it can be read, and a func that removes it. The delegating
// authentication and authorization options of k8s.io/apiserver only read a
// kubeconfig file (or the in-cluster config); this lets them use the manager's
// rest.Config. They read it while the server is being built, so the caller
// removes it once ApplyTo has returned. Where the platform can, the file lives
// only in memory (memoryFile): the operator runs with a read-only root and no
// writable volume, as its manifests ship it.
func delegationKubeconfig(cfg *rest.Config) (string, func(), error) {
	data, err := clientcmd.Write(*kubeconfigFor(cfg))
	if err != nil {
		return "", nil, fmt.Errorf("serializing the delegation kubeconfig: %w", err)
	}
	path, remove, err := memoryFile("proxy-lease-api-kubeconfig", data)
	if err != nil {
		return "", nil, fmt.Errorf("holding the delegation kubeconfig: %w", err)
	}
	return path, remove, nil
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
