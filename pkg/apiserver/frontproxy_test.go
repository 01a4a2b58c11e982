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
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
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

func newTestCA(t *testing.T, name string) *testCA {
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

func (ca *testCA) client(t *testing.T, cn string, notAfter time.Time) *x509.Certificate {
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

func requestHeaderConfig(t *testing.T, ca *switchableCA) *authenticatorfactory.RequestHeaderConfig {
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

func staticCA(t *testing.T, ca *testCA) dynamiccertificates.CAContentProvider {
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
	tests := []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{"proxied ProxyLease request", authorizer.AttributesRecord{User: proxied, ResourceRequest: true, APIGroup: leasingv1alpha1.GroupName, Resource: "proxyleases", Verb: "delete"}, authorizer.DecisionAllow},
		{"direct ProxyLease request", authorizer.AttributesRecord{User: direct, ResourceRequest: true, APIGroup: leasingv1alpha1.GroupName, Resource: "proxyleases", Verb: "delete"}, authorizer.DecisionDeny},
		{"proxied impersonation", authorizer.AttributesRecord{User: proxied, ResourceRequest: true, APIGroup: "", Resource: "users", Verb: "impersonate"}, authorizer.DecisionDeny},
		{"proxied non-resource request", authorizer.AttributesRecord{User: proxied, Path: "/openapi/v2", Verb: "get"}, authorizer.DecisionDeny},
	}
	for _, tt := range tests {
		for _, conditionsAware := range []bool{false, true} {
			delegate := &recordingAuthorizer{}
			z := frontProxyAuthorizer{delegate: delegate}
			var got authorizer.Decision
			if conditionsAware {
				d := z.ConditionsAwareAuthorize(context.Background(), tt.attrs)
				got = authorizer.DecisionNoOpinion
				if d.IsAllow() {
					got = authorizer.DecisionAllow
				} else if d.IsDeny() {
					got = authorizer.DecisionDeny
				}
			} else {
				got, _, _ = z.Authorize(context.Background(), tt.attrs)
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
