package devenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
)

// servingCerts are the files writeServingCerts wrote.
type servingCerts struct{ caPath, certPath, keyPath string }

// certValidity is generous for a dev run; every run makes new ones.
const certValidity = 7 * 24 * time.Hour

// writeServingCerts makes a CA and a serving certificate for the aggregated
// API server, valid for the names kube-apiserver dials through the
// ExternalName Service (<service>.<namespace>.svc is the TLS server name) and
// for localhost, and writes ca.crt, tls.crt and tls.key into dir. The
// APIService then carries the CA in spec.caBundle: verified TLS, as in
// production, instead of insecureSkipTLSVerify.
func writeServingCerts(dir string) (servingCerts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return servingCerts{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return servingCerts{}, fmt.Errorf("generating CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "proxy-operator-dev-apiserver-ca"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return servingCerts{}, fmt.Errorf("signing CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return servingCerts{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return servingCerts{}, fmt.Errorf("generating serving key: %w", err)
	}
	svc, ns := apiserver.DefaultServiceName, apiserver.DefaultServiceNamespace
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: svc + "." + ns + ".svc"},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local", "localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return servingCerts{}, fmt.Errorf("signing serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return servingCerts{}, err
	}
	out := servingCerts{
		caPath:   filepath.Join(dir, "ca.crt"),
		certPath: filepath.Join(dir, "tls.crt"),
		keyPath:  filepath.Join(dir, "tls.key"),
	}
	for _, f := range []struct {
		path  string
		block *pem.Block
		mode  os.FileMode
	}{
		{out.caPath, &pem.Block{Type: "CERTIFICATE", Bytes: caDER}, 0o644},
		{out.certPath, &pem.Block{Type: "CERTIFICATE", Bytes: der}, 0o644},
		{out.keyPath, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}, 0o600},
	} {
		if err := writeFileAtomic(f.path, pem.EncodeToMemory(f.block), f.mode); err != nil {
			return servingCerts{}, fmt.Errorf("writing %s: %w", f.path, err)
		}
	}
	return out, nil
}
