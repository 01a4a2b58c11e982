package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	clocktesting "k8s.io/utils/clock/testing"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// testCA issues client certificates for the front-proxy tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: epoch.Add(-time.Hour), NotAfter: epoch.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) client(t testing.TB, cn string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: epoch.Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert
}

// switchableCA is a requestheader CA whose bundle a test can replace.
type switchableCA struct {
	dynamiccertificates.CAContentProvider
}

func requestHeaderConfig(t testing.TB, ca *switchableCA) *authenticatorfactory.RequestHeaderConfig {
	t.Helper()
	return &authenticatorfactory.RequestHeaderConfig{
		CAContentProvider:   ca,
		AllowedClientNames:  headerrequest.StaticStringSlice{"front-proxy"},
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
	}
}

func staticCA(t testing.TB, ca *testCA) dynamiccertificates.CAContentProvider {
	t.Helper()
	p, err := dynamiccertificates.NewStaticCAContent("front-proxy-ca", ca.pem)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func proxiedRequest(method, target, body string, leaf *x509.Certificate, userName string) *http.Request {
	r := httptest.NewRequest(method, target, stringsReader(body))
	if leaf != nil {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	}
	if userName != "" {
		r.Header.Set("X-Remote-User", userName)
		r.Header.Add("X-Remote-Group", "system:serviceaccounts")
		r.Header.Set("X-Remote-Extra-Scopes", "a")
	}
	return r
}

// The front-proxy authenticator trusts only a certificate of the
// requestheader CA with an allowed name, and a remembered verification never
// outlives the certificate or the CA pool it was made against.
func TestFrontProxyAuthenticator(t *testing.T) {
	ca, other := newTestCA(t, "front-proxy-ca"), newTestCA(t, "other-ca")
	clk := clocktesting.NewFakeClock(epoch)
	provider := &switchableCA{CAContentProvider: staticCA(t, ca)}
	a := newFrontProxyAuthenticator(requestHeaderConfig(t, provider), clk)

	good := ca.client(t, "front-proxy", epoch.Add(10*time.Second))
	resp, ok, err := a.AuthenticateRequest(proxiedRequest("GET", "/", "", good, "alice"))
	if err != nil || !ok {
		t.Fatalf("front proxy: %v %v", ok, err)
	}
	if !isFrontProxied(resp.User) || resp.User.GetName() != "alice" ||
		!slices.Equal(resp.User.GetGroups(), []string{"system:serviceaccounts", user.AllAuthenticated}) ||
		!slices.Equal(resp.User.GetExtra()["scopes"], []string{"a"}) {
		t.Errorf("user %#v", resp.User)
	}

	for _, tc := range []struct {
		name string
		leaf *x509.Certificate
		user string
	}{
		{"no certificate", nil, "alice"},
		{"another CA's certificate", other.client(t, "front-proxy", epoch.Add(time.Hour)), "alice"},
		{"a name that is not allowed", ca.client(t, "someone", epoch.Add(time.Hour)), "alice"},
		{"no user header", good, ""},
	} {
		if resp, ok, _ := a.AuthenticateRequest(proxiedRequest("GET", "/", "", tc.leaf, tc.user)); ok {
			t.Errorf("%s: authenticated as %v", tc.name, resp.User)
		}
	}

	// Remembered, but not past the certificate's expiry.
	clk.SetTime(epoch.Add(20 * time.Second))
	if _, ok, _ := a.AuthenticateRequest(proxiedRequest("GET", "/", "", good, "alice")); ok {
		t.Error("an expired certificate still authenticates")
	}
	// Nor past a change of the CA: a certificate of the old CA is verified
	// again, against the new one.
	clk.SetTime(epoch)
	if _, ok, _ := a.AuthenticateRequest(proxiedRequest("GET", "/", "", good, "alice")); !ok {
		t.Fatal("the certificate no longer authenticates")
	}
	provider.CAContentProvider = staticCA(t, other)
	if _, ok, _ := a.AuthenticateRequest(proxiedRequest("GET", "/", "", good, "alice")); ok {
		t.Error("a certificate of the replaced CA still authenticates")
	}
}

type recordingAuthorizer struct {
	authorizer.Authorizer
	asked int
}

func (r *recordingAuthorizer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	r.asked++
	return authorizer.DecisionDeny, "denied by the delegate", nil
}

func (r *recordingAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(r.Authorize(ctx, a))
}

// Only ProxyLease resource requests of the front proxy skip the review; a
// request of any other user, group or kind is asked of the delegate.
func TestFrontProxyAuthorizer(t *testing.T) {
	proxied := &frontProxyUser{Info: &user.DefaultInfo{Name: "alice"}}
	direct := &user.DefaultInfo{Name: "alice"}
	lease := func(u user.Info, verb, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, ResourceRequest: true, APIGroup: leasingv1alpha1.GroupName,
			Resource: "proxyleases", Namespace: "ns", Name: name, Verb: verb}
	}
	// The request kube-apiserver authorized and proxied.
	requested := func(verb, name string) *request.RequestInfo {
		return &request.RequestInfo{IsResourceRequest: true, Verb: verb, APIGroup: leasingv1alpha1.GroupName,
			APIVersion: "v1alpha1", Resource: "proxyleases", Namespace: "ns", Name: name}
	}
	report := lease(proxied, "create", "l1")
	report.Subresource = "report"
	tests := []struct {
		name    string
		request *request.RequestInfo
		attrs   authorizer.AttributesRecord
		want    authorizer.Decision
	}{
		{"the proxied request itself", requested("delete", "l1"), lease(proxied, "delete", "l1"), authorizer.DecisionAllow},
		{"a direct request", requested("delete", "l1"), lease(direct, "delete", "l1"), authorizer.DecisionDeny},
		{"the create of an apply that creates", requested("patch", "l1"), lease(proxied, "create", "l1"), authorizer.DecisionDeny},
		{"the create of an update that creates", requested("update", "l1"), lease(proxied, "create", "l1"), authorizer.DecisionDeny},
		{"another lease than the request's", requested("delete", "l1"), lease(proxied, "delete", "l2"), authorizer.DecisionDeny},
		{"a subresource the request did not name", requested("create", "l1"), report, authorizer.DecisionDeny},
		{"no request information", nil, lease(proxied, "delete", "l1"), authorizer.DecisionDeny},
		{"proxied impersonation", requested("impersonate", ""), authorizer.AttributesRecord{User: proxied, ResourceRequest: true, APIGroup: "", Resource: "users", Verb: "impersonate"}, authorizer.DecisionDeny},
		{"proxied non-resource request", &request.RequestInfo{Verb: "get", Path: "/openapi/v2"}, authorizer.AttributesRecord{User: proxied, Path: "/openapi/v2", Verb: "get"}, authorizer.DecisionDeny},
	}
	for _, tt := range tests {
		ctx := context.Background()
		if tt.request != nil {
			ctx = request.WithRequestInfo(ctx, tt.request)
		}
		for _, conditionsAware := range []bool{false, true} {
			delegate := &recordingAuthorizer{}
			z := frontProxyAuthorizer{delegate: delegate}
			var got authorizer.Decision
			if conditionsAware {
				d := z.ConditionsAwareAuthorize(ctx, tt.attrs)
				got = authorizer.DecisionNoOpinion
				if d.IsAllow() {
					got = authorizer.DecisionAllow
				} else if d.IsDeny() {
					got = authorizer.DecisionDeny
				}
			} else {
				got, _, _ = z.Authorize(ctx, tt.attrs)
			}
			if got != tt.want {
				t.Errorf("%s (conditions-aware %v): %v, want %v", tt.name, conditionsAware, got, tt.want)
			}
			if wantAsked := tt.want != authorizer.DecisionAllow; (delegate.asked > 0) != wantAsked {
				t.Errorf("%s: delegate asked %d times", tt.name, delegate.asked)
			}
		}
	}
}

// headerUserDifferences reads the user of n random header sets with read
// (wrapped in the system:authenticated group adder, as the authenticator
// uses it) and with k8s.io/apiserver's requestheader authenticator, and
// describes where they differ, or where read changed the headers.
func headerUserDifferences(t *testing.T, read func(headerUser) authenticator.Request, n int) []string {
	t.Helper()
	keys := []string{
		"X-Remote-User", "X-Remote-Uid", "X-Remote-Group", "X-Other-User", "X-Other-Group",
		"X-Remote-Extra-Scopes", "X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id",
		"x-remote-extra-lower", "X-Remote-Extra-", "X-Remote-Extra-Bad%zz", "X-Remote-Extra-A%2Fb",
		"X-Other-Extra-Scopes", "Content-Type",
	}
	values := []string{"", "alice", "system:authenticated", "system:unauthenticated", "system:anonymous", "a b", "Ünïcode"}
	configs := []headerUser{
		{names: headerrequest.StaticStringSlice{"X-Remote-User"}, uids: headerrequest.StaticStringSlice{"X-Remote-Uid"},
			groups: headerrequest.StaticStringSlice{"X-Remote-Group"}, extraPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"}},
		{names: headerrequest.StaticStringSlice{"x-other-user", "X-Remote-User"}, uids: headerrequest.StaticStringSlice{},
			groups: headerrequest.StaticStringSlice{"X-Remote-Group", "x-other-group"}, extraPrefixes: headerrequest.StaticStringSlice{"x-other-extra-", "X-Remote-Extra-"}},
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	var out []string
	for i := range n {
		h := http.Header{}
		for range rng.IntN(8) {
			k := keys[rng.IntN(len(keys))]
			for range 1 + rng.IntN(3) {
				h[k] = append(h[k], values[rng.IntN(len(values))]) // raw keys: not canonicalized
			}
		}
		cfg := configs[i%len(configs)]
		want, wantOK, _ := group.NewAuthenticatedGroupAdder(headerrequest.NewDynamic(cfg.names, cfg.uids, cfg.groups, cfg.extraPrefixes)).
			AuthenticateRequest(&http.Request{Header: h.Clone()})
		before := h.Clone()
		got, gotOK, _ := read(cfg).AuthenticateRequest(&http.Request{Header: h})
		switch {
		case !reflect.DeepEqual(h, before):
			out = append(out, fmt.Sprintf("headers %v changed to %v", before, h))
		case gotOK != wantOK:
			out = append(out, fmt.Sprintf("headers %v: authenticated %v, the library %v", h, gotOK, wantOK))
		case gotOK:
			if d := cmp.Diff(want.User, got.User); d != "" {
				out = append(out, fmt.Sprintf("headers %v (-library +ours):\n%s", h, d))
			}
		}
	}
	return out
}

// The lean path's header reader names the user the library's requestheader
// authenticator names, for any header set, and leaves the headers in place.
func TestHeaderUserIsTheLibrarys(t *testing.T) {
	read := func(h headerUser) authenticator.Request { return group.NewAuthenticatedGroupAdder(h) }
	if d := headerUserDifferences(t, read, 5000); len(d) > 0 {
		t.Errorf("%d of 5000 differ; first:\n%s", len(d), d[0])
	}
}

// firstGroupOnly is a reader with one rule wrong: it keeps one group.
type firstGroupOnly struct{ headerUser }

func (f firstGroupOnly) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := f.headerUser.AuthenticateRequest(req)
	if ok {
		u := resp.User.(*user.DefaultInfo)
		u.Groups = u.Groups[:min(len(u.Groups), 1)]
	}
	return resp, ok, err
}

// Negative control: the comparison catches a reader that differs in one rule.
func TestHeaderUserCheckCatchesADifference(t *testing.T) {
	read := func(h headerUser) authenticator.Request { return group.NewAuthenticatedGroupAdder(firstGroupOnly{h}) }
	if d := headerUserDifferences(t, read, 500); len(d) == 0 {
		t.Error("a reader that keeps one group passed the comparison")
	}
}

// The generic chain's authentication removes the user headers, as the
// library's does; the lean path's leaves them for a hand-over.
func TestFrontProxyAuthenticationRemovesHeadersOnlyForTheGenericChain(t *testing.T) {
	ca := newTestCA(t, "front-proxy-ca")
	a := newFrontProxyAuthenticator(requestHeaderConfig(t, &switchableCA{CAContentProvider: staticCA(t, ca)}), clocktesting.NewFakeClock(epoch))
	leaf := ca.client(t, "front-proxy", epoch.Add(time.Hour))
	userHeaders := func(r *http.Request) []string {
		var got []string
		for k := range r.Header {
			if strings.HasPrefix(k, "X-Remote-") {
				got = append(got, k)
			}
		}
		slices.Sort(got)
		return got
	}
	all := []string{"X-Remote-Extra-Scopes", "X-Remote-Group", "X-Remote-User"}

	r := proxiedRequest("POST", "/", "", leaf, "alice")
	if _, ok, err := a.authenticate(r); !ok || err != nil {
		t.Fatalf("lean: %v %v", ok, err)
	}
	if got := userHeaders(r); !slices.Equal(got, all) {
		t.Errorf("lean authentication left %v, want %v", got, all)
	}
	if _, ok, err := a.AuthenticateRequest(r); !ok || err != nil {
		t.Fatalf("generic: %v %v", ok, err)
	}
	if got := userHeaders(r); len(got) != 0 {
		t.Errorf("generic authentication left %v", got)
	}
}
