package proxyauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// ProxyRef names the Proxy a key, a credential or a helper belongs to.
type ProxyRef struct {
	Namespace, Name string
}

func (p ProxyRef) String() string { return p.Namespace + "/" + p.Name }

// Credentials are what a client sends to the proxy (HTTP Basic in
// Proxy-Authorization).
type Credentials struct {
	Username, Password string
	// ExpiresAt is when the proxy stops accepting them.
	ExpiresAt time.Time
}

// Userinfo is the credentials as a proxy URL's userinfo.
func (c Credentials) Userinfo() *url.Userinfo { return url.UserPassword(c.Username, c.Password) }

// WithURL returns proxyURL with c as its userinfo ("http://user:pass@host:port"),
// or proxyURL unchanged when it does not parse.
func (c Credentials) WithURL(proxyURL string) string {
	u, err := url.Parse(proxyURL)
	if err != nil || u.Host == "" {
		return proxyURL
	}
	u.User = c.Userinfo()
	return u.String()
}

// ProbeUsername is the username of the operator's health probes; no lease's
// username (Handle: 26 base32 letters and digits) can equal it.
const ProbeUsername = "proxy-operator-probe"

// listUsername is the username the helper signs its poll of the live list
// with; it is never accepted by a proxy.
const listUsername = "proxy-operator-list"

// kinds separate the MACs of the three uses of a proxy's key, so that no
// credential of one use verifies as another.
const (
	kindLease = "lease"
	kindProbe = "probe"
	kindList  = "list"
)

// Handle is the username of a lease's credentials: 26 lowercase base32
// characters of SHA-256(leaseID). Short enough for any proxy's basic-auth
// limits, and it shows a proxy's logs nothing of the lease (the ID carries
// the holder and the target).
func Handle(leaseID string) string {
	sum := sha256.Sum256([]byte(leaseID))
	return lowerBase32.EncodeToString(sum[:16])
}

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// passwordVersion is the first byte of every password.
const passwordVersion = 1

// macSize is the length of a password's MAC: 128 bits.
const macSize = 16

// passwordSize is version, issued, expires (uint32 seconds each) and the MAC.
const passwordSize = 1 + 4 + 4 + macSize

// mint returns the password of (kind, proxy, username) valid from issued to
// expires under key.
func mint(key []byte, kind string, p ProxyRef, username string, issued, expires time.Time) string {
	b := make([]byte, 0, passwordSize)
	b = append(b, passwordVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(issued.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(expires.Unix()))
	b = append(b, mac(key, kind, p, username, b[1:9])...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func mac(key []byte, kind string, p ProxyRef, username string, times []byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, s := range []string{kind, p.Namespace, p.Name, username} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(times)
	return h.Sum(nil)[:macSize]
}

// Errors of a check. Each says why a credential is refused; the helper
// returns the message to Squid, which logs it (the client sees 407).
var (
	// ErrMalformed: not a password this package mints.
	ErrMalformed = errors.New("malformed credentials")
	// ErrBadSignature: minted with another key, for another proxy or
	// username, or altered.
	ErrBadSignature = errors.New("credentials not signed for this proxy")
	// ErrExpired: past its expiry (the lease ended or was renewed long ago).
	ErrExpired = errors.New("credentials expired")
	// ErrNotLive: the lease is not live on this proxy (released, or ended).
	ErrNotLive = errors.New("lease is not live on this proxy")
)

// parsed is a password taken apart.
type parsed struct {
	issued, expires time.Time
	times, mac      []byte
}

func parse(password string) (parsed, error) {
	// Strict: one encoding per password (a lax decoder ignores the last
	// character's spare bits, so 16 passwords would pass for each).
	b, err := base64.RawURLEncoding.Strict().DecodeString(password)
	if err != nil || len(b) != passwordSize || b[0] != passwordVersion {
		return parsed{}, ErrMalformed
	}
	return parsed{
		issued:  time.Unix(int64(binary.BigEndian.Uint32(b[1:5])), 0),
		expires: time.Unix(int64(binary.BigEndian.Uint32(b[5:9])), 0),
		times:   b[1:9],
		mac:     b[9:],
	}, nil
}

// check verifies password as (kind, p, username) under key at now; it
// returns the password taken apart.
func check(key []byte, kind string, p ProxyRef, username, password string, now time.Time) (parsed, error) {
	pw, err := parse(password)
	if err != nil {
		return parsed{}, err
	}
	if !hmac.Equal(pw.mac, mac(key, kind, p, username, pw.times)) {
		return parsed{}, ErrBadSignature
	}
	if !now.Before(pw.expires) {
		return parsed{}, fmt.Errorf("%w at %s", ErrExpired, pw.expires.UTC().Format(time.RFC3339))
	}
	return pw, nil
}
