package proxyauth

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// LiveList is what the operator answers a helper's poll: the usernames
// (Handle) of the leases live on the proxy at AsOf.
type LiveList struct {
	// AsOf is the operator's time of the list, in Unix seconds (rounded
	// down): a credential issued at or after it is newer than the list.
	AsOf int64 `json:"asOf"`
	// Usernames of the live leases.
	Usernames []string `json:"usernames"`
}

// LivePath is the operator's endpoint of live lists (discovery API, with
// ?namespace=&name= and "Authorization: ProxyKey <ListToken>").
const LivePath = "/v1/proxyauth/live"

// AuthScheme is the Authorization scheme of a helper's poll.
const AuthScheme = "ProxyKey"

// Verifier is the helper's side: it checks credentials for one proxy with
// that proxy's key and the last live list it was given. Safe for concurrent
// use.
type Verifier struct {
	key   []byte
	proxy ProxyRef
	clock clock.PassiveClock

	mu sync.Mutex
	// listed is the last list, fetched at fetched (the helper's clock).
	listed  map[string]struct{}
	asOf    time.Time
	fetched time.Time
}

// NewVerifier returns the verifier of c's proxy; a nil clock is the real one.
func NewVerifier(c HelperConfig, clk clock.PassiveClock) *Verifier {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Verifier{key: c.Key, proxy: c.Proxy(), clock: clk}
}

// SetLive records a list just fetched.
func (v *Verifier) SetLive(l LiveList) {
	live := make(map[string]struct{}, len(l.Usernames))
	for _, u := range l.Usernames {
		live[u] = struct{}{}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.listed, v.asOf, v.fetched = live, time.Unix(l.AsOf, 0), v.clock.Now()
}

// probeSkew is how far a probe credential's issue time may be from the
// helper's clock beyond ProbeTTL (the operator's clock and the proxy's).
const probeSkew = time.Minute

// Check decides whether username and password may use the proxy. Probe
// credentials need a valid signature and expiry; a lease's also need the
// lease in the live list, unless the list is older than the credential (a
// lease granted since) or stale (older than StaleAfter: then the expiry
// alone decides).
func (v *Verifier) Check(username, password string) error {
	_, err := v.verify(username, password)
	return err
}

// credential is one that Check accepted: whose it is and its times.
type credential struct {
	username        string
	issued, expires time.Time
}

// verify is Check, returning the credential it accepted.
func (v *Verifier) verify(username, password string) (credential, error) {
	now := v.clock.Now()
	if username == ProbeUsername {
		pw, err := check(v.key, kindProbe, v.proxy, username, password, now)
		if err != nil {
			return credential{}, err
		}
		// The operator mints a probe's credentials for ProbeTTL: any
		// issued longer ago (whatever expiry they claim, up to 2106) or in
		// the future are refused, so leaked ones die within minutes.
		if age := now.Sub(pw.issued); age > ProbeTTL+probeSkew || age < -probeSkew {
			return credential{}, fmt.Errorf("%w: probe credentials issued %s, more than %s from now", ErrExpired, pw.issued.UTC().Format(time.RFC3339), ProbeTTL+probeSkew)
		}
		expires := pw.expires
		if bound := pw.issued.Add(ProbeTTL + probeSkew); bound.Before(expires) {
			expires = bound
		}
		return credential{username: username, issued: pw.issued, expires: expires}, nil
	}
	pw, err := check(v.key, kindLease, v.proxy, username, password, now)
	if err != nil {
		return credential{}, err
	}
	c := credential{username: username, issued: pw.issued, expires: pw.expires}
	if !v.live(c) {
		return credential{}, ErrNotLive
	}
	return c, nil
}

// live reports whether traffic opened with c (accepted by verify) may go
// on: while its lease is in a fresh live list, or the list is older than c;
// with no fresh list, until c expires. A renewed lease keeps what it opened
// with its earlier credentials; a released or ended one loses it at the
// first list without it.
func (v *Verifier) live(c credential) bool {
	now := v.clock.Now()
	if c.username == ProbeUsername {
		return now.Before(c.expires)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.listed == nil || now.Sub(v.fetched) > StaleAfter {
		return now.Before(c.expires)
	}
	_, ok := v.listed[c.username]
	return ok || !c.issued.Before(v.asOf)
}
