package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// ErrUnknownToken: Kubernetes does not know the token, or it is not a
// ServiceAccount's (answered 401).
var ErrUnknownToken = errors.New("not a ServiceAccount token Kubernetes accepts")

// ForbiddenError: the ServiceAccount may not create ProxyLeases in its
// namespace (answered 403).
type ForbiddenError struct{ User, Namespace string }

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("%s may not create proxyleases.%s in namespace %s (RBAC: bind the ClusterRole proxy-operator:crawler there)",
		e.User, leasingv1alpha1.GroupName, e.Namespace)
}

// IsForbidden reports whether err is a *ForbiddenError.
func IsForbidden(err error) bool {
	var e *ForbiddenError
	return errors.As(err, &e)
}

// serviceAccountPrefix starts the user name of every ServiceAccount token.
const serviceAccountPrefix = "system:serviceaccount:"

// ErrReviewsThrottled: more unknown tokens than ReviewsPerSecond came to be
// reviewed; this one was not (answered 503 with Retry-After, as an
// unreachable kube-apiserver is: a real token is accepted on a retry).
var ErrReviewsThrottled = errors.New("too many unknown tokens to review now")

// Defaults of KubernetesTokens.
const (
	DefaultKubernetesTokenTTL = 10 * time.Second
	// DefaultReviewsPerSecond and reviewBurst bound the reviews of tokens
	// not in the cache: a pod fleet starting at once fits the burst.
	DefaultReviewsPerSecond = 20
	reviewBurst             = 100
	// maxKubernetesTokenCache bounds each of the two caches: identities
	// kube-apiserver knows, and tokens it does not.
	maxKubernetesTokenCache = 10000
)

// KubernetesTokens authenticates a pod's ServiceAccount token for the HTTP
// API when no configured token matches it: a TokenReview says whose it is,
// and a SubjectAccessReview that it may create ProxyLeases in its own
// namespace, which becomes the identity's one namespace (as RBAC decides for
// the ProxyLease API). Answers, refusals included, are cached for TTL, so a
// client's requests cost kube-apiserver two reviews per TTL.
//
// Garbage costs nothing and evicts nothing: a token that is not shaped as a
// current ServiceAccount token (a JWT whose subject is a ServiceAccount and
// whose expiry, if any, is ahead) is refused without a review; tokens
// kube-apiserver did not know are cached apart from the identities it did
// know, so a flood of them only ever evicts its own kind; and reviews of
// tokens in neither cache are rate-limited (ReviewsPerSecond).
type KubernetesTokens struct {
	Reviews authnclient.TokenReviewInterface
	Access  authzclient.SubjectAccessReviewInterface
	// TTL caches each answer (default DefaultKubernetesTokenTTL).
	TTL time.Duration
	// ReviewsPerSecond bounds the reviews of tokens in no cache (default
	// DefaultReviewsPerSecond, with a burst of 100).
	ReviewsPerSecond float64
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu sync.Mutex
	// known holds identities kube-apiserver knows (RBAC's refusals
	// included); unknown the tokens it does not.
	known, unknown kubeTokenCache
	limiter        *rate.Limiter
}

type kubeTokenEntry struct {
	tok   Token
	err   error
	until time.Time
}

// kubeTokenCache is one of KubernetesTokens' caches, by the token's SHA-256.
type kubeTokenCache map[[sha256.Size]byte]kubeTokenEntry

// put adds e, first dropping the expired entries when the cache is full, and
// every entry when none had expired.
func (c *kubeTokenCache) put(sum [sha256.Size]byte, e kubeTokenEntry, now time.Time) {
	if *c == nil || len(*c) >= maxKubernetesTokenCache {
		live := kubeTokenCache{}
		for s, old := range *c {
			if now.Before(old.until) {
				live[s] = old
			}
		}
		if len(live) >= maxKubernetesTokenCache {
			live = kubeTokenCache{}
		}
		*c = live
	}
	(*c)[sum] = e
}

// Authenticate returns what token stands for: Identity is the
// ServiceAccount's user name (system:serviceaccount:<ns>:<name>) and
// Namespaces its namespace. Errors: ErrUnknownToken, *ForbiddenError,
// ErrReviewsThrottled, or the reviews' own (kube-apiserver unreachable: not
// cached).
func (k *KubernetesTokens) Authenticate(ctx context.Context, token string) (Token, error) {
	now := k.now()
	if !shapedAsServiceAccountToken(token, now) {
		return Token{}, ErrUnknownToken
	}
	sum := sha256.Sum256([]byte(token))
	k.mu.Lock()
	for _, c := range []kubeTokenCache{k.known, k.unknown} {
		if e, ok := c[sum]; ok && now.Before(e.until) {
			k.mu.Unlock()
			return e.tok, e.err
		}
	}
	if k.limiter == nil {
		perSecond := k.ReviewsPerSecond
		if perSecond <= 0 {
			perSecond = DefaultReviewsPerSecond
		}
		k.limiter = rate.NewLimiter(rate.Limit(perSecond), reviewBurst)
	}
	allowed := k.limiter.AllowN(now, 1)
	k.mu.Unlock()
	if !allowed {
		return Token{}, ErrReviewsThrottled
	}
	tok, err := k.review(ctx, token)
	unknown := errors.Is(err, ErrUnknownToken)
	if err != nil && !unknown && !IsForbidden(err) {
		return Token{}, err
	}
	ttl := k.TTL
	if ttl <= 0 {
		ttl = DefaultKubernetesTokenTTL
	}
	e := kubeTokenEntry{tok: tok, err: err, until: now.Add(ttl)}
	k.mu.Lock()
	defer k.mu.Unlock()
	if unknown {
		k.unknown.put(sum, e, now)
	} else {
		k.known.put(sum, e, now)
	}
	return tok, err
}

func (k *KubernetesTokens) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// shapedAsServiceAccountToken reports whether token could be a
// ServiceAccount token kube-apiserver accepts at now: a JWT (three base64url
// parts) whose claims name a ServiceAccount as subject and, if they carry an
// expiry (bound tokens do; legacy Secret tokens do not), one after now. Only
// its shape: the signature is kube-apiserver's to check.
func shapedAsServiceAccountToken(token string, now time.Time) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] == "" {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		Sub string   `json:"sub"`
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(raw, &claims) != nil || !strings.HasPrefix(claims.Sub, serviceAccountPrefix) {
		return false
	}
	return claims.Exp == nil || float64(now.Unix()) < *claims.Exp
}

func (k *KubernetesTokens) review(ctx context.Context, token string) (Token, error) {
	tr, err := k.Reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return Token{}, fmt.Errorf("reviewing a bearer token with kube-apiserver: %w", err)
	}
	user := tr.Status.User.Username
	if !tr.Status.Authenticated || !strings.HasPrefix(user, serviceAccountPrefix) {
		return Token{}, ErrUnknownToken
	}
	ns, _, ok := strings.Cut(strings.TrimPrefix(user, serviceAccountPrefix), ":")
	if !ok || ns == "" {
		return Token{}, ErrUnknownToken
	}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range tr.Status.User.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := k.Access.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user, Groups: tr.Status.User.Groups, UID: tr.Status.User.UID, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "create",
			Group: leasingv1alpha1.GroupName, Resource: "proxyleases"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return Token{}, fmt.Errorf("authorizing %s with kube-apiserver: %w", user, err)
	}
	if !sar.Status.Allowed {
		return Token{}, &ForbiddenError{User: user, Namespace: ns}
	}
	return Token{Identity: user, Namespaces: []string{ns}}, nil
}
