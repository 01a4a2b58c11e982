package discovery

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"

	"github.com/proxy-operator/proxy-operator/pkg/httpdrain/httpdraintest"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// TestShutdownClosesSilentUnusedConnections: a client connection on which no
// request began (a pooled connection a transport dialed and did not use; over
// TLS, one whose handshake is done) does not hold the server's shutdown.
func TestShutdownClosesSilentUnusedConnections(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "http"
		if useTLS {
			name = "https"
		}
		t.Run(name, func(t *testing.T) {
			store, _ := lease.New(lease.Options{}, nil)
			o := Options{Service: realService(t, store)}
			var roots *x509.CertPool
			if useTLS {
				dir := t.TempDir()
				ca := writePair(t, dir)
				so := DefaultServingOptions()
				so.TLSCertFile, so.TLSKeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
				cert, err := so.ServingCert(nil)
				if err != nil {
					t.Fatal(err)
				}
				o.Cert = cert
				roots = x509.NewCertPool()
				roots.AddCert(ca)
			}
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			// Over TLS the silent connection has finished its handshake.
			dial := func(t *testing.T, addr string) net.Conn {
				c := httpdraintest.DialTCP(t, addr)
				if roots == nil {
					return c
				}
				tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				return tc
			}
			httpdraintest.ServeStopsWithSilentConnection(t, s.Serve, dial)
		})
	}
}
