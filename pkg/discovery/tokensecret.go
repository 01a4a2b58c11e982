package discovery

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// TokenSecretKey is the key of the token Secret: the same "token,identity"
// lines as --discovery-token-file.
const TokenSecretKey = "token"

// DefaultTokenSecretInterval is how often the token Secret is read again.
const DefaultTokenSecretInterval = 30 * time.Second

// TokenSecret is the discovery API's tokens kept in a Secret of the
// operator's namespace: created with one generated token (identity
// DefaultIdentity) when it does not exist, and followed afterwards, so a
// crawler added to it is accepted without a restart.
type TokenSecret struct {
	// Secrets reads and creates the Secret (an uncached client).
	Secrets         corev1client.SecretsGetter
	Namespace, Name string
	// Clock paces Follow; nil means the real clock.
	Clock clock.WithTicker
	// Interval between reads (default DefaultTokenSecretInterval).
	Interval time.Duration
}

// LoadTokens returns the tokens the API starts with and, when they come from
// a Secret, the TokenSecret to Follow. In order: --discovery-token-file,
// else --discovery-token-secret (in namespace, created if missing), else
// $PROXY_OPERATOR_DISCOVERY_TOKEN, else none (authentication off).
func (o *ServingOptions) LoadTokens(ctx context.Context, getenv func(string) string, secrets corev1client.SecretsGetter, namespace string) (Tokens, *TokenSecret, error) {
	if o.TokenFile != "" || o.TokenSecret == "" {
		tokens, err := o.Tokens(getenv)
		return tokens, nil, err
	}
	if namespace == "" {
		return nil, nil, errors.New("--discovery-token-secret: the operator's namespace is unknown (give --namespace out of a cluster)")
	}
	ts := &TokenSecret{Secrets: secrets, Namespace: namespace, Name: o.TokenSecret}
	tokens, err := ts.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	return tokens, ts, nil
}

// Load reads the Secret's tokens, creating the Secret with one generated
// token first if it does not exist.
func (t *TokenSecret) Load(ctx context.Context) (Tokens, error) {
	secrets := t.Secrets.Secrets(t.Namespace)
	s, err := secrets.Get(ctx, t.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s, err = t.create(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery token Secret %s/%s: %w", t.Namespace, t.Name, err)
	}
	return t.parse(s)
}

func (t *TokenSecret) create(ctx context.Context) (*corev1.Secret, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("generating a token: %w", err)
	}
	data := fmt.Appendf(nil, "# One token,identity line per crawler (docs/api.md); the operator reads changes within %s.\n%s,%s\n",
		t.interval(), hex.EncodeToString(b), DefaultIdentity)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: t.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "proxy-operator"}},
		Data: map[string][]byte{TokenSecretKey: data},
	}
	created, err := t.Secrets.Secrets(t.Namespace).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) { // another replica was first
		return t.Secrets.Secrets(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	}
	if err == nil {
		log.FromContext(ctx).Info("discovery token Secret created with one generated token", "secret", t.Namespace+"/"+t.Name, "identity", DefaultIdentity)
	}
	return created, err
}

func (t *TokenSecret) parse(s *corev1.Secret) (Tokens, error) {
	data, ok := s.Data[TokenSecretKey]
	if !ok {
		return nil, fmt.Errorf("discovery token Secret %s/%s has no key %q", t.Namespace, t.Name, TokenSecretKey)
	}
	tokens, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("discovery token Secret %s/%s key %q: %w", t.Namespace, t.Name, TokenSecretKey, err)
	}
	return tokens, nil
}

func (t *TokenSecret) interval() time.Duration {
	if t.Interval > 0 {
		return t.Interval
	}
	return DefaultTokenSecretInterval
}

// Follow returns a Runnable that reads the Secret every Interval and hands
// each valid change to srv.SetTokens; a Secret that is missing, malformed or
// empty is logged and the tokens in use stay.
func (t *TokenSecret) Follow(srv *Server) *TokenFollower { return &TokenFollower{secret: t, srv: srv} }

// TokenFollower is TokenSecret.Follow's Runnable (every replica runs one).
type TokenFollower struct {
	secret *TokenSecret
	srv    *Server
}

// NeedLeaderElection is false: every replica serves the API.
func (f *TokenFollower) NeedLeaderElection() bool { return false }

// Start follows the Secret until ctx ends.
func (f *TokenFollower) Start(ctx context.Context) error {
	t := f.secret
	clk := t.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	logger := log.FromContext(ctx).WithName("discovery-tokens")
	var last []byte
	ticker := clk.NewTicker(t.interval())
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
		s, err := t.Secrets.Secrets(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			logger.Error(err, "reading the discovery token Secret; keeping the tokens in use", "secret", t.Namespace+"/"+t.Name)
			continue
		}
		if bytes.Equal(s.Data[TokenSecretKey], last) {
			continue
		}
		tokens, err := t.parse(s)
		if err == nil {
			err = f.srv.SetTokens(tokens)
		}
		if err != nil {
			logger.Error(err, "discovery token Secret unusable; keeping the tokens in use", "secret", t.Namespace+"/"+t.Name)
			continue
		}
		last = s.Data[TokenSecretKey]
		logger.Info("discovery tokens reloaded", "identities", Identities(tokens))
	}
}
