package discovery

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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

// Defaults of KubernetesTokens.
const (
	DefaultKubernetesTokenTTL = 10 * time.Second
	maxKubernetesTokenCache   = 10000
)

// KubernetesTokens authenticates a pod's ServiceAccount token for the HTTP
// API when no configured token matches it: a TokenReview says whose it is,
// and a SubjectAccessReview that it may create ProxyLeases in its own
// namespace, which becomes the identity's one namespace (as RBAC decides for
// the ProxyLease API). Answers, refusals included, are cached for TTL, so a
// client's requests cost kube-apiserver two reviews per TTL, and a flood of
// random tokens at most the cache's bound per TTL.
type KubernetesTokens struct {
	Reviews authnclient.TokenReviewInterface
	Access  authzclient.SubjectAccessReviewInterface
	// TTL caches each answer (default DefaultKubernetesTokenTTL).
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]kubeTokenEntry
}

type kubeTokenEntry struct {
	tok   Token
	err   error
	until time.Time
}

// Authenticate returns what token stands for: Identity is the
// ServiceAccount's user name (system:serviceaccount:<ns>:<name>) and
// Namespaces its namespace. Errors: ErrUnknownToken, *ForbiddenError, or the
// reviews' own (kube-apiserver unreachable: not cached).
func (k *KubernetesTokens) Authenticate(ctx context.Context, token string) (Token, error) {
	now := k.now()
	sum := sha256.Sum256([]byte(token))
	k.mu.Lock()
	if e, ok := k.cache[sum]; ok && now.Before(e.until) {
		k.mu.Unlock()
		return e.tok, e.err
	}
	k.mu.Unlock()
	tok, err := k.review(ctx, token)
	if err != nil && !errors.Is(err, ErrUnknownToken) && !IsForbidden(err) {
		return Token{}, err
	}
	ttl := k.TTL
	if ttl <= 0 {
		ttl = DefaultKubernetesTokenTTL
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cache == nil || len(k.cache) >= maxKubernetesTokenCache {
		k.cache = k.prune(now)
	}
	k.cache[sum] = kubeTokenEntry{tok: tok, err: err, until: now.Add(ttl)}
	return tok, err
}

func (k *KubernetesTokens) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// prune keeps the live entries, or none when they fill the cache.
func (k *KubernetesTokens) prune(now time.Time) map[[sha256.Size]byte]kubeTokenEntry {
	out := map[[sha256.Size]byte]kubeTokenEntry{}
	for s, e := range k.cache {
		if now.Before(e.until) {
			out[s] = e
		}
	}
	if len(out) >= maxKubernetesTokenCache {
		return map[[sha256.Size]byte]kubeTokenEntry{}
	}
	return out
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
