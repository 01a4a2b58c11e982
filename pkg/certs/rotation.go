package certs

import (
	"crypto/x509"
	"fmt"
	"slices"
	"time"
)

// Secret keys. tls.crt and tls.key make the Secret a valid kubernetes.io/tls
// Secret; the CA's key stays next to it so any replica can renew.
const (
	KeyServingCert = "tls.crt"
	KeyServingKey  = "tls.key"
	KeyCACert      = "ca.crt"
	KeyCAKey       = "ca.key"
	// KeyCABundle is the current CA followed by renewed CAs not yet expired:
	// what clients must trust (the APIService's caBundle).
	KeyCABundle = "ca-bundle.crt"
)

// renewAt is when c is due: two thirds into its life, so a renewal failing
// for a while still leaves a third of it.
func renewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(life * 2 / 3)
}

// state is what the Secret holds.
type state struct {
	ca      *KeyPair
	bundle  []*x509.Certificate // ca first
	serving *KeyPair
}

// BundlePEM is the CA bundle clients trust.
func (s *state) bundlePEM() []byte { return EncodeCertificates(s.bundle...) }

// nextRenewal is the earliest time something in s is due.
func (s *state) nextRenewal() time.Time {
	t := renewAt(s.ca.Cert)
	if r := renewAt(s.serving.Cert); r.Before(t) {
		t = r
	}
	return t
}

func (s *state) data() map[string][]byte {
	return map[string][]byte{
		KeyServingCert: s.serving.CertPEM,
		KeyServingKey:  s.serving.KeyPEM,
		KeyCACert:      s.ca.CertPEM,
		KeyCAKey:       s.ca.KeyPEM,
		KeyCABundle:    s.bundlePEM(),
	}
}

// parseState reads a Secret's data.
func parseState(data map[string][]byte) (*state, error) {
	ca, err := ParseKeyPair(data[KeyCACert], data[KeyCAKey])
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", KeyCACert, KeyCAKey, err)
	}
	serving, err := ParseKeyPair(data[KeyServingCert], data[KeyServingKey])
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", KeyServingCert, KeyServingKey, err)
	}
	bundle, err := ParseCertificates(data[KeyCABundle])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyCABundle, err)
	}
	return &state{ca: ca, bundle: bundle, serving: serving}, nil
}

// policy is what the certificates must be.
type policy struct {
	caName       string
	hosts        []string
	caValidity   time.Duration
	certValidity time.Duration
}

// renew returns the state due at now starting from cur (nil: nothing yet)
// and why it differs from cur (no reasons: cur is returned as it is).
func (p policy) renew(cur *state, now time.Time) (*state, []string, error) {
	var reasons []string
	next := &state{}
	switch {
	case cur == nil:
		reasons = append(reasons, "no certificates yet")
	case !now.Before(renewAt(cur.ca.Cert)):
		reasons = append(reasons, fmt.Sprintf("CA due since %s (expires %s)", renewAt(cur.ca.Cert).UTC().Format(time.RFC3339), cur.ca.Cert.NotAfter.UTC().Format(time.RFC3339)))
	default:
		next.ca = cur.ca
	}
	if next.ca == nil {
		ca, err := NewCA(p.caName, now, p.caValidity)
		if err != nil {
			return nil, nil, err
		}
		next.ca = ca
	}
	// The bundle keeps every earlier CA until it expires: clients that still
	// hold a certificate chain or a bundle from before a CA renewal go on
	// verifying.
	next.bundle = []*x509.Certificate{next.ca.Cert}
	if cur != nil {
		for _, c := range append([]*x509.Certificate{cur.ca.Cert}, cur.bundle...) {
			if now.Before(c.NotAfter) && !slices.ContainsFunc(next.bundle, c.Equal) {
				next.bundle = append(next.bundle, c)
			}
		}
		if !sameCerts(cur.bundle, next.bundle) && len(reasons) == 0 {
			reasons = append(reasons, "CA bundle holds an expired or missing CA")
		}
	}
	switch {
	case cur == nil:
	case next.ca != cur.ca:
		reasons = append(reasons, "serving certificate signed by the renewed CA")
	case !now.Before(renewAt(cur.serving.Cert)):
		reasons = append(reasons, fmt.Sprintf("serving certificate due since %s (expires %s)", renewAt(cur.serving.Cert).UTC().Format(time.RFC3339), cur.serving.Cert.NotAfter.UTC().Format(time.RFC3339)))
	case !sameHosts(Hosts(cur.serving.Cert), p.hosts):
		reasons = append(reasons, fmt.Sprintf("serving certificate names %v, want %v", Hosts(cur.serving.Cert), p.hosts))
	case cur.serving.Cert.CheckSignatureFrom(cur.ca.Cert) != nil:
		reasons = append(reasons, "serving certificate not signed by the CA")
	default:
		next.serving = cur.serving
	}
	if len(reasons) == 0 {
		return cur, nil, nil
	}
	if next.serving == nil {
		s, err := next.ca.Issue(p.hosts, now, p.certValidity)
		if err != nil {
			return nil, nil, err
		}
		next.serving = s
	}
	return next, reasons, nil
}

func sameCerts(a, b []*x509.Certificate) bool {
	return slices.EqualFunc(a, b, func(x, y *x509.Certificate) bool { return x.Equal(y) })
}

func sameHosts(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
