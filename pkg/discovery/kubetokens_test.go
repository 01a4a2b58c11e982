package discovery

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// fakeKubeTokens answers as KubernetesTokens would, by token.
type fakeKubeTokens map[string]error

var _ TokenAuthenticator = fakeKubeTokens(nil)

func (f fakeKubeTokens) Authenticate(_ context.Context, token string) (Token, error) {
	err, ok := f[token]
	if !ok {
		return Token{}, ErrUnknownToken
	}
	if err != nil {
		return Token{}, err
	}
	return Token{Identity: "system:serviceaccount:b:crawler", Namespaces: []string{"b"}}, nil
}

// A token none of the configured ones matches goes to the Kubernetes
// authenticator: its ServiceAccount leases in its namespace only, a
// ServiceAccount RBAC refuses is 403, an unknown token 401, and a review
// that cannot be made now 503 with Retry-After. The configured tokens never
// reach it.
func TestKubernetesTokens(t *testing.T) {
	tokens, err := ParseTokens([]byte("tok-all,everyone\n"))
	if err != nil {
		t.Fatal(err)
	}
	kube := fakeKubeTokens{"sa-ok": nil, "sa-denied": &ForbiddenError{User: "system:serviceaccount:b:other", Namespace: "b"},
		"sa-down": errors.New("connection refused"), "tok-all": errors.New("a configured token was reviewed")}
	e := newEnv(t, func(o *Options) { o.Tokens = tokens; o.Kubernetes = kube })
	for _, name := range []string{"b-1", "b-2"} {
		e.store.UpsertProxy(lease.ProxyInfo{Namespace: "b", Name: name, URL: "http://10.0.1.1:3128", Host: "10.0.1.1", Port: 3128, Healthy: true})
	}
	for _, tc := range []struct {
		name, auth, body string
		want             int
		code             string
	}{
		{"a ServiceAccount in its namespace", "Bearer sa-ok", `{"namespace":"b"}`, http.StatusCreated, ""},
		{"a ServiceAccount without a namespace leases in its own", "Bearer sa-ok", `{}`, http.StatusCreated, ""},
		{"a ServiceAccount in another namespace", "Bearer sa-ok", `{"namespace":"a"}`, http.StatusForbidden, "forbidden"},
		{"a ServiceAccount RBAC refuses", "Bearer sa-denied", `{}`, http.StatusForbidden, "forbidden"},
		{"an unknown token", "Bearer nobody", `{}`, http.StatusUnauthorized, "unauthorized"},
		{"kube-apiserver unreachable", "Bearer sa-down", `{}`, http.StatusServiceUnavailable, "unavailable"},
		{"a configured token", "Bearer tok-all", `{"namespace":"a"}`, http.StatusCreated, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v1/leases", tc.body, tc.auth)
			if r.status != tc.want || (tc.code != "" && errorCode(t, r.body) != tc.code) {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, tc.want, tc.code)
			}
			if tc.want == http.StatusServiceUnavailable && r.header.Get("Retry-After") == "" {
				t.Errorf("a 503 without Retry-After")
			}
		})
	}
}
