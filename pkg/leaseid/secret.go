package leaseid

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// SecretKey is the key Secret's data key holding the signing key.
const SecretKey = "key"

// LoadKey sets s's key from the Secret o names (EnsureKey): what a replica
// does as it takes the leases over, before it grants any.
func (s *Signer) LoadKey(ctx context.Context, secrets corev1client.SecretsGetter, o Options) error {
	key, err := EnsureKey(ctx, secrets, o.Namespace, o.SecretName)
	if err != nil {
		return err
	}
	return s.SetKey(key)
}

// EnsureKey returns the signing key kept in the Secret namespace/name,
// creating the Secret with a new random key when it does not exist (every
// replica then reads the one key that won the create). A Secret without a
// usable key is an error that names it: replacing the key would orphan
// every lease signed with it, so the operator leaves that to a human.
func EnsureKey(ctx context.Context, secrets corev1client.SecretsGetter, namespace, name string) ([]byte, error) {
	return EnsureKeyFor(ctx, secrets, namespace, name, "lease signing key", "leases signed with the old one can then not be reclaimed")
}

// EnsureKeyFor is EnsureKey for any random key of KeySize bytes kept the same
// way (the proxy auth key too): what names the key in logs and errors, and
// loss says what replacing it costs.
func EnsureKeyFor(ctx context.Context, secrets corev1client.SecretsGetter, namespace, name, what, loss string) ([]byte, error) {
	c := secrets.Secrets(namespace)
	s, err := c.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		key := make([]byte, KeySize)
		_, _ = rand.Read(key) // crypto/rand.Read never fails (Go ≥1.24)
		s, err = c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "proxy-operator"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{SecretKey: key},
		}, metav1.CreateOptions{})
		if err == nil {
			log.FromContext(ctx).Info(what+" created", "secret", namespace+"/"+name)
		}
		if apierrors.IsAlreadyExists(err) {
			s, err = c.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s %s/%s: %w", what, namespace, name, err)
	}
	key := s.Data[SecretKey]
	if len(key) < KeySize {
		return nil, fmt.Errorf("%s %s/%s: data[%q] has %d bytes, want at least %d (delete the Secret to have a new key made; %s)",
			what, namespace, name, SecretKey, len(key), KeySize, loss)
	}
	return key, nil
}
