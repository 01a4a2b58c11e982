package proxyauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"k8s.io/utils/clock"
)

// MinKeySize is the shortest installation key, in bytes.
const MinKeySize = 32

// ProbeTTL is how long a health probe's credentials last: one probe.
const ProbeTTL = time.Minute

// listTokenSkew is how far the issue time of a helper's list token may be
// from the operator's clock (the helper's and the operator's clocks differ).
const listTokenSkew = 2 * time.Minute

// Keyring is the operator's side: it holds the installation key, derives each
// proxy's key from it and mints credentials. Safe for concurrent use.
type Keyring struct {
	master []byte
	clock  clock.PassiveClock
}

// NewKeyring returns the keyring of the installation key master (at least
// MinKeySize bytes); a nil clock is the real clock.
func NewKeyring(master []byte, c clock.PassiveClock) (*Keyring, error) {
	if len(master) < MinKeySize {
		return nil, fmt.Errorf("proxy auth key: %d bytes, want at least %d", len(master), MinKeySize)
	}
	if c == nil {
		c = clock.RealClock{}
	}
	return &Keyring{master: append([]byte(nil), master...), clock: c}, nil
}

// ProxyKey is p's own key: HMAC-SHA256 of p under the installation key. A
// proxy holds this key only, which verifies (and mints) credentials for p
// and no other proxy.
func (k *Keyring) ProxyKey(p ProxyRef) []byte {
	h := hmac.New(sha256.New, k.master)
	h.Write([]byte("proxy-operator proxy key v1\x00"))
	h.Write([]byte(p.Namespace))
	h.Write([]byte{0})
	h.Write([]byte(p.Name))
	return h.Sum(nil)
}

// Fingerprint identifies the installation key without revealing it (12 hex
// digits of a hash), so that instances built with another key can be told
// apart and replaced after a rotation.
func (k *Keyring) Fingerprint() string {
	h := hmac.New(sha256.New, k.master)
	h.Write([]byte("proxy-operator key fingerprint"))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// LeaseCredentials are the credentials of the lease leaseID on p, valid from
// issued (the grant) until expires (the lease's expiry, rounded up to the
// second). A renewed lease gets new ones; the old ones keep working until
// their own expiry while the lease lives.
func (k *Keyring) LeaseCredentials(p ProxyRef, leaseID string, issued, expires time.Time) Credentials {
	exp := ceilSecond(expires)
	user := Handle(leaseID)
	return Credentials{Username: user, Password: mint(k.ProxyKey(p), kindLease, p, user, issued, exp), ExpiresAt: exp}
}

// ProbeCredentials are the credentials of one health probe of p: ProbeTTL
// long, accepted without a live lease.
func (k *Keyring) ProbeCredentials(p ProxyRef) Credentials {
	now := k.clock.Now()
	exp := now.Add(ProbeTTL)
	return Credentials{Username: ProbeUsername, Password: mint(k.ProxyKey(p), kindProbe, p, ProbeUsername, now, exp), ExpiresAt: exp}
}

// VerifyListToken checks the token a helper of p signs its poll of the live
// list with (ListToken).
func (k *Keyring) VerifyListToken(p ProxyRef, token string) error {
	now := k.clock.Now()
	pw, err := check(k.ProxyKey(p), kindList, p, listUsername, token, now)
	if err != nil {
		return err
	}
	if d := pw.issued.Sub(now); d > listTokenSkew || d < -listTokenSkew {
		return fmt.Errorf("%w: issued %s, more than %s from the operator's clock", ErrExpired, pw.issued.UTC().Format(time.RFC3339), listTokenSkew)
	}
	return nil
}

// ListToken is what a helper holding key (p's key) sends to read p's live
// list: valid for listTokenSkew from now.
func ListToken(key []byte, p ProxyRef, now time.Time) string {
	return mint(key, kindList, p, listUsername, now, now.Add(listTokenSkew))
}

func ceilSecond(t time.Time) time.Time {
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}
