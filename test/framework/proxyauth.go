package framework

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// OperatorKeyring reads the proxy auth key the operator keeps in the Secret
// namespace/name (proxyauth.DefaultSecretName in its namespace), for tests
// that go through a proxy as the operator's probes do, without a lease.
func OperatorKeyring(ctx context.Context, secrets corev1client.SecretsGetter, namespace, name string) (*proxyauth.Keyring, error) {
	s, err := secrets.Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the proxy auth key: %w", err)
	}
	return proxyauth.NewKeyring(s.Data[leaseid.SecretKey], nil)
}

// ProbeURL is proxyURL with the operator's probe credentials for the Proxy
// namespace/name: what gets through that proxy without a lease.
func ProbeURL(k *proxyauth.Keyring, namespace, name, proxyURL string) string {
	return k.ProbeCredentials(proxyauth.ProxyRef{Namespace: namespace, Name: name}).WithURL(proxyURL)
}

// Local origins: the tests' sites listen on loopback, on any port, which
// the proxies refuse by default (they reach the public internet only, on
// web ports: proxyauth.Egress). A test operator opens them explicitly.
const (
	localOriginCIDR  = "127.0.0.0/8"
	localOriginPorts = "1-65535"
)

// AllowLocalOrigins opens loopback, on any port, to o's proxies.
func AllowLocalOrigins(o *proxyauth.Options) {
	o.AllowedCIDRs, o.AllowedPorts = []string{localOriginCIDR}, []string{localOriginPorts}
}

// LocalOriginArgs are AllowLocalOrigins as an operator's flags.
func LocalOriginArgs() []string {
	return []string{"--proxy-allowed-cidrs=" + localOriginCIDR, "--proxy-allowed-ports=" + localOriginPorts}
}
