package leasing

import (
	"context"
	"fmt"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// ProxyAuth mints the credentials a lease's proxy checks and verifies a
// proxy's poll of its live list; *proxyauth.Keyring implements it.
type ProxyAuth interface {
	// LeaseCredentials are the credentials of lease leaseID on p, valid
	// from issued until expires.
	LeaseCredentials(p proxyauth.ProxyRef, leaseID string, issued, expires time.Time) proxyauth.Credentials
	// VerifyListToken returns nil when token is a fresh list token of p.
	VerifyListToken(p proxyauth.ProxyRef, token string) error
}

// Credentials returns the credentials of l's proxy: false when the proxy
// checks none (an External proxy, or proxy auth is off). They change with
// each renewal (the expiry is in them).
func (s *Service) Credentials(l Lease) (proxyauth.Credentials, bool) {
	if s.auth == nil || l.Proxy.External {
		return proxyauth.Credentials{}, false
	}
	p := proxyauth.ProxyRef{Namespace: l.Proxy.Namespace, Name: l.Proxy.Name}
	return s.auth.LeaseCredentials(p, l.ID, l.AcquiredAt, l.ExpiresAt), true
}

// ProxyURL is the URL a holder configures its client with: the proxy's URL
// with the lease's credentials as userinfo (as it is, without credentials).
func (s *Service) ProxyURL(l Lease) string {
	c, ok := s.Credentials(l)
	if !ok {
		return l.Proxy.URL
	}
	return c.WithURL(l.Proxy.URL)
}

// LiveList is what the auth helper of proxy p is told: the usernames of
// the leases live on it now. token is the helper's list token. Errors:
// ReasonForbidden (a token not of p, or stale; proxy auth off),
// ReasonNotLeader.
func (s *Service) LiveList(ctx context.Context, p proxyauth.ProxyRef, token string) (proxyauth.LiveList, error) {
	if err := s.gate.check(ctx); err != nil {
		return proxyauth.LiveList{}, err
	}
	if s.auth == nil {
		return proxyauth.LiveList{}, &Error{Reason: ReasonForbidden, Cause: fmt.Errorf("proxy auth is off")}
	}
	if err := s.auth.VerifyListToken(p, token); err != nil {
		return proxyauth.LiveList{}, &Error{Reason: ReasonForbidden, Cause: fmt.Errorf("live list of %s: %w", p, err)}
	}
	ids, now := s.store.LiveOn(ProxyKey{Namespace: p.Namespace, Name: p.Name})
	l := proxyauth.LiveList{AsOf: now.Unix(), Usernames: make([]string, 0, len(ids))}
	for _, id := range ids {
		l.Usernames = append(l.Usernames, proxyauth.Handle(id))
	}
	return l, nil
}
