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
	// live is the last list, fetched at fetched (the helper's clock).
	live    map[string]struct{}
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
	v.live, v.asOf, v.fetched = live, time.Unix(l.AsOf, 0), v.clock.Now()
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
	now := v.clock.Now()
	if username == ProbeUsername {
		issued, err := check(v.key, kindProbe, v.proxy, username, password, now)
		if err != nil {
			return err
		}
		// The operator mints a probe's credentials for ProbeTTL: any
		// issued longer ago (whatever expiry they claim, up to 2106) or in
		// the future are refused, so leaked ones die within minutes.
		if age := now.Sub(issued); age > ProbeTTL+probeSkew || age < -probeSkew {
			return fmt.Errorf("%w: probe credentials issued %s, more than %s from now", ErrExpired, issued.UTC().Format(time.RFC3339), ProbeTTL+probeSkew)
		}
		return nil
	}
	issued, err := check(v.key, kindLease, v.proxy, username, password, now)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.live == nil || now.Sub(v.fetched) > StaleAfter {
		return nil
	}
	if _, ok := v.live[username]; ok || !issued.Before(v.asOf) {
		return nil
	}
	return ErrNotLive
}
