package discovery

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// certRunner is a certificate source that must run to follow changes (the
// file controller of NewDynamicServingContentFromFiles).
type certRunner interface {
	Run(ctx context.Context, workers int)
}

// servingTLS is the server's TLS configuration over a certificate source
// whose content may change at any time: each handshake takes the current
// pair, parsed once per change.
type servingTLS struct {
	source dynamiccertificates.CertKeyContentProvider

	mu      sync.Mutex
	certPEM []byte
	parsed  *tls.Certificate
}

// newServingTLS takes source's current pair on every handshake.
func newServingTLS(source dynamiccertificates.CertKeyContentProvider) *servingTLS {
	return &servingTLS{source: source}
}

// config serves TLS 1.2 and later.
func (s *servingTLS) config() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.current() },
	}
}

// current is the parsed current pair.
func (s *servingTLS) current() (*tls.Certificate, error) {
	certPEM, keyPEM := s.source.CurrentCertKeyContent()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parsed != nil && bytes.Equal(certPEM, s.certPEM) {
		return s.parsed, nil
	}
	if len(certPEM) == 0 {
		return nil, errors.New("discovery API: no serving certificate yet")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("discovery API serving certificate %s: %w", s.source.Name(), err)
	}
	s.certPEM, s.parsed = certPEM, &pair
	return s.parsed, nil
}
