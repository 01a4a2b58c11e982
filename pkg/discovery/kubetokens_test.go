package discovery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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

// jwt is a token shaped as a ServiceAccount's (its signature is sig).
func jwt(sub string, exp time.Time, sig string) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"sub": sub, "exp": exp.Unix()})
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + "." + sig
}

// reviewingKube is kube-apiserver's reviews for KubernetesTokens: it knows
// the tokens in known (each a ServiceAccount RBAC lets lease) and counts the
// TokenReviews it answered.
func reviewingKube(known ...string) (*KubernetesTokens, *atomic.Int32) {
	kube := fake.NewClientset()
	var reviews atomic.Int32
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		if slices.Contains(known, tr.Spec.Token) {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:b:crawler"}}
		}
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
		sar.Status.Allowed = true
		return true, sar, nil
	})
	return &KubernetesTokens{Reviews: kube.AuthenticationV1().TokenReviews(), Access: kube.AuthorizationV1().SubjectAccessReviews()}, &reviews
}

// Garbage costs no review: what is not shaped as a current ServiceAccount
// token is refused as unknown before kube-apiserver is asked.
func TestKubernetesTokensRefuseGarbageWithoutAReview(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	sa := "system:serviceaccount:b:crawler"
	for _, tc := range []struct {
		name, token string
		reviews     int32
	}{
		{"a word", "not-a-token", 0},
		{"two parts", "a.b", 0},
		{"claims not base64", "a.!!!.c", 0},
		{"claims not JSON", "a." + base64.RawURLEncoding.EncodeToString([]byte("{")) + ".c", 0},
		{"no signature", strings.TrimSuffix(jwt(sa, now.Add(time.Hour), ""), "."), 0},
		{"a user's, not a ServiceAccount's", jwt("alice", now.Add(time.Hour), "sig"), 0},
		{"expired", jwt(sa, now.Add(-time.Second), "sig"), 0},
		{"shaped as a ServiceAccount's", jwt(sa, now.Add(time.Hour), "sig"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, reviews := reviewingKube()
			k.Now = func() time.Time { return now }
			if _, err := k.Authenticate(context.Background(), tc.token); !errors.Is(err, ErrUnknownToken) {
				t.Errorf("Authenticate = %v, want ErrUnknownToken", err)
			}
			if n := reviews.Load(); n != tc.reviews {
				t.Errorf("%d TokenReviews, want %d", n, tc.reviews)
			}
		})
	}
}

// Tokens kube-apiserver does not know are cached apart from identities it
// knows: a flood of them (twice the cache's bound) leaves a ServiceAccount
// answered from the cache; each is reviewed once; and reviews of tokens in
// no cache are rate-limited (100 at once, then 20 a second).
func TestKubernetesTokensUnderAFloodOfUnknownTokens(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	sa := "system:serviceaccount:b:crawler"
	real := jwt(sa, now.Add(time.Hour), "real")
	forged := func(i int) string { return jwt(sa, now.Add(time.Hour), "forged"+strconv.Itoa(i)) }
	ctx := context.Background()

	k, reviews := reviewingKube(real)
	k.Now = func() time.Time { return now }
	k.ReviewsPerSecond = 1e9 // the flood reaches kube-apiserver: the caches are under test
	if _, err := k.Authenticate(ctx, real); err != nil {
		t.Fatal(err)
	}
	for i := range 2 * maxKubernetesTokenCache {
		now = now.Add(time.Microsecond) // the limiter's refill
		if _, err := k.Authenticate(ctx, forged(i)); !errors.Is(err, ErrUnknownToken) {
			t.Fatalf("forged token %d: %v", i, err)
		}
	}
	before := reviews.Load()
	if tok, err := k.Authenticate(ctx, real); err != nil || tok.Identity != sa {
		t.Fatalf("the ServiceAccount after the flood: %v, %v", tok, err)
	}
	if _, err := k.Authenticate(ctx, forged(2*maxKubernetesTokenCache-1)); !errors.Is(err, ErrUnknownToken) {
		t.Fatal(err)
	}
	if n := reviews.Load() - before; n != 0 {
		t.Errorf("after the flood, the ServiceAccount and the last forged token cost %d reviews, want 0 (cached)", n)
	}

	k, reviews = reviewingKube(real)
	k.Now = func() time.Time { return now }
	var throttled int
	for i := range 500 {
		_, err := k.Authenticate(ctx, forged(i))
		switch {
		case errors.Is(err, ErrReviewsThrottled):
			throttled++
		case !errors.Is(err, ErrUnknownToken):
			t.Fatalf("forged token %d: %v", i, err)
		}
	}
	if reviews.Load() != reviewBurst || throttled != 500-reviewBurst {
		t.Errorf("500 unknown tokens at once: %d reviews, %d throttled; want %d, %d", reviews.Load(), throttled, reviewBurst, 500-reviewBurst)
	}
	now = now.Add(time.Second)
	if _, err := k.Authenticate(ctx, real); err != nil {
		t.Errorf("a second later, a ServiceAccount: %v", err)
	}
}
