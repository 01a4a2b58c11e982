package apiserver

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/clock"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// Requests that kube-apiserver proxies to this server (aggregation) arrive
// over a TLS connection authenticated with the front-proxy client certificate
// and name the calling user in X-Remote-* headers. kube-apiserver has already
// authenticated that user and authorized this very request (verb, group,
// resource, namespace, name) before proxying it, so a second
// SubjectAccessReview for it asks kube-apiserver the question it has just
// answered — one per delete, since the delegating authorizer's cache is keyed
// by the object name, behind a client limited to 200 QPS. The two types below
// let such requests through on kube-apiserver's decision; every other
// request (a bearer token or a client certificate sent to this server
// directly) is authenticated and authorized as before. Trusting the front
// proxy's identity claims is already what requestheader authentication does:
// whoever holds that certificate can name any user, system:masters included,
// so this adds no trust. Options.TrustFrontProxyAuthorization turns it off.

// frontProxyUser is a user named by a verified front proxy.
type frontProxyUser struct{ user.Info }

// isFrontProxied reports whether the request's user came from the front proxy.
func isFrontProxied(u user.Info) bool {
	_, ok := u.(*frontProxyUser)
	return ok
}

// frontProxyAuthenticator is requestheader authentication whose client
// certificate check is remembered: verifying the certificate chain (an ECDSA
// signature check) on every request was a tenth of this server's CPU. A
// certificate verified against a CA pool stays verified for verifiedCertTTL,
// and never past its NotAfter; a new CA pool (rotated requestheader CA)
// starts afresh. Verifications are remembered per parsed certificate: every
// request of one TLS connection carries the same one, so a connection is
// verified once (and a pointer cannot name another certificate).
type frontProxyAuthenticator struct {
	verifyOptions x509request.VerifyOptionFunc
	allowedNames  headerrequest.StringSliceProvider
	// headers reads the user from the request's headers without removing
	// them; system:authenticated is added as the delegating authenticator
	// adds it.
	headers authenticator.Request
	// The headers that carry the user (X-Remote-User, X-Remote-Uid,
	// X-Remote-Group, X-Remote-Extra-…).
	usernameHeaders, uidHeaders, groupHeaders, extraPrefixes headerrequest.StringSliceProvider
	clock                                                    clock.PassiveClock

	mu       sync.Mutex
	roots    *x509.CertPool
	verified map[*x509.Certificate]time.Time // leaf → valid until
}

// verifiedCertTTL bounds how long one verification is trusted.
const verifiedCertTTL = time.Minute

// maxVerifiedCerts bounds the memory of verifications (a front proxy keeps
// a few connections; more are other clients trying, or old connections).
const maxVerifiedCerts = 64

func newFrontProxyAuthenticator(cfg *authenticatorfactory.RequestHeaderConfig, clk clock.PassiveClock) *frontProxyAuthenticator {
	return &frontProxyAuthenticator{
		verifyOptions: cfg.CAContentProvider.VerifyOptions,
		allowedNames:  cfg.AllowedClientNames,
		headers: group.NewAuthenticatedGroupAdder(headerUser{
			names: cfg.UsernameHeaders, uids: cfg.UIDHeaders, groups: cfg.GroupHeaders, extraPrefixes: cfg.ExtraHeaderPrefixes,
		}),
		usernameHeaders: cfg.UsernameHeaders,
		uidHeaders:      cfg.UIDHeaders,
		groupHeaders:    cfg.GroupHeaders,
		extraPrefixes:   cfg.ExtraHeaderPrefixes,
		clock:           clk,
		verified:        map[*x509.Certificate]time.Time{},
	}
}

// AuthenticateRequest authenticates a request of the front proxy, or says
// nothing (false, nil error) about any other. As requestheader
// authentication does, it removes the user headers it read: the generic
// chain's authenticator.
func (a *frontProxyAuthenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := a.authenticate(req)
	if ok {
		headerrequest.ClearAuthenticationHeaders(req.Header, a.usernameHeaders, a.uidHeaders, a.groupHeaders, a.extraPrefixes)
	}
	return resp, ok, err
}

// authenticate is AuthenticateRequest leaving the request as it was: the lean
// path's, which hands a request it does not answer to the generic chain
// untouched.
func (a *frontProxyAuthenticator) authenticate(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	opts, ok := a.verifyOptions()
	if !ok {
		return nil, false, nil
	}
	leaf := req.TLS.PeerCertificates[0]
	if err := a.verify(leaf, req.TLS.PeerCertificates[1:], opts); err != nil {
		return nil, false, err
	}
	resp, ok, err := a.headers.AuthenticateRequest(req)
	if !ok || err != nil {
		return resp, ok, err
	}
	resp.User = &frontProxyUser{Info: resp.User}
	return resp, true, nil
}

// headerUser reads the user named by the request's headers exactly as
// k8s.io/apiserver's requestheader authenticator does (the first non-empty
// username and UID header, every non-empty group header value, extras keyed
// by the lower-cased, unescaped rest of each prefixed header's name, in
// prefix order), but does not remove the headers; TestHeaderUserIsTheLibrarys
// holds it to the library.
type headerUser struct {
	names, uids, groups, extraPrefixes headerrequest.StringSliceProvider
}

func (h headerUser) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	name := firstHeader(req.Header, h.names.Value())
	if name == "" {
		return nil, false, nil
	}
	groups := []string{}
	for _, n := range h.groups.Value() {
		for _, v := range req.Header[http.CanonicalHeaderKey(n)] {
			if v != "" {
				groups = append(groups, v)
			}
		}
	}
	extra := map[string][]string{}
	for _, prefix := range h.extraPrefixes.Value() {
		for k, vs := range req.Header {
			if len(k) < len(prefix) || !strings.EqualFold(k[:len(prefix)], prefix) {
				continue
			}
			key := strings.ToLower(k[len(prefix):])
			if unescaped, err := url.PathUnescape(key); err == nil {
				key = unescaped
			}
			extra[key] = append(extra[key], vs...)
		}
	}
	return &authenticator.Response{User: &user.DefaultInfo{
		Name: name, UID: firstHeader(req.Header, h.uids.Value()), Groups: groups, Extra: extra,
	}}, true, nil
}

func firstHeader(h http.Header, names []string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

func (a *frontProxyAuthenticator) verify(leaf *x509.Certificate, intermediates []*x509.Certificate, opts x509.VerifyOptions) error {
	if names := a.allowedNames.Value(); len(names) > 0 && !slices.Contains(names, leaf.Subject.CommonName) {
		return fmt.Errorf("x509: subject with cn=%s is not in the allowed list", leaf.Subject.CommonName)
	}
	now := a.clock.Now()
	a.mu.Lock()
	if a.roots != opts.Roots {
		a.roots = opts.Roots
		clear(a.verified)
	}
	until, ok := a.verified[leaf]
	a.mu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	if opts.Intermediates == nil && len(intermediates) > 0 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range intermediates {
			opts.Intermediates.AddCert(c)
		}
	}
	opts.CurrentTime = now
	if _, err := leaf.Verify(opts); err != nil {
		return err
	}
	until = now.Add(verifiedCertTTL)
	if leaf.NotAfter.Before(until) {
		until = leaf.NotAfter
	}
	a.mu.Lock()
	if a.roots == opts.Roots {
		if len(a.verified) >= maxVerifiedCerts {
			clear(a.verified)
		}
		a.verified[leaf] = until
	}
	a.mu.Unlock()
	return nil
}

// frontProxyAuthorizer allows the ProxyLease requests kube-apiserver
// authorized before proxying them, and asks delegate about everything else.
type frontProxyAuthorizer struct{ delegate authorizer.Authorizer }

var _ authorizer.Authorizer = frontProxyAuthorizer{}

const frontProxyAllowed = "authorized by kube-apiserver before it proxied the request"

// authorizedByFrontProxy: a ProxyLease resource request from the front
// proxy, and a question about that very request (its verb, resource,
// subresource, namespace and name, as its RequestInfo says). The handler
// asks questions of its own too, which kube-apiserver never answered: an
// update or a server-side apply of a lease that does not exist creates it,
// and the handler then asks for "create" while kube-apiserver authorized
// only "update" or "patch". Those go to the delegate (a SubjectAccessReview),
// so a Role of get and patch cannot create.
func authorizedByFrontProxy(ctx context.Context, a authorizer.Attributes) bool {
	if !isFrontProxied(a.GetUser()) || !a.IsResourceRequest() || a.GetAPIGroup() != leasingv1alpha1.GroupName {
		return false
	}
	ri, ok := request.RequestInfoFrom(ctx)
	return ok && ri.IsResourceRequest && ri.Verb == a.GetVerb() && ri.APIGroup == a.GetAPIGroup() &&
		ri.Resource == a.GetResource() && ri.Subresource == a.GetSubresource() &&
		ri.Namespace == a.GetNamespace() && ri.Name == a.GetName()
}

func (z frontProxyAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if authorizedByFrontProxy(ctx, a) {
		return authorizer.DecisionAllow, frontProxyAllowed, nil
	}
	return z.delegate.Authorize(ctx, a)
}

func (z frontProxyAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if authorizedByFrontProxy(ctx, a) {
		return authorizer.ConditionsAwareDecisionAllow(frontProxyAllowed, nil)
	}
	return z.delegate.ConditionsAwareAuthorize(ctx, a)
}

// EvaluateConditions: this authorizer's own decisions are unconditional, so
// any conditions are the delegate's.
func (z frontProxyAuthorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return z.delegate.EvaluateConditions(ctx, d, data)
}
