package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// CloudInitError says the cloud-init data of a Proxy cannot be resolved: the
// referenced Secret is missing, not labelled for the operator, or lacks the
// key. It is the user's to fix; the reconciler reports it in the Provisioned
// condition and retries with backoff (and on any event of the Secret).
type CloudInitError struct {
	// Secret is the referenced Secret.
	Secret types.NamespacedName
	// Key is the Secret key looked up.
	Key string
	// Err is the cause.
	Err error
}

func (e *CloudInitError) Error() string {
	return fmt.Sprintf("resolving cloud-init from secret %s key %q: %v", e.Secret, e.Key, e.Err)
}

func (e *CloudInitError) Unwrap() error { return e.Err }

// IsCloudInitError reports whether err is or wraps a *CloudInitError.
func IsCloudInitError(err error) bool {
	var e *CloudInitError
	return errors.As(err, &e)
}

// errSecretNotVisible is the cause for a Secret the cache does not hold.
var errSecretNotVisible = fmt.Errorf("secret not found, or not labelled %s=true (only labelled secrets are visible to the operator)", crawlv1alpha1.CloudInitSecretLabel)

// resolveCloudInit returns the cloud-init user data of p: the inline
// userData, or the referenced Secret's key. The Secret is read through the
// manager cache, which holds only labelled Secrets; the label is checked
// again here so that a reader without that restriction behaves the same.
// Errors other than *CloudInitError are API failures (retry with backoff).
func (r *ProxyReconciler) resolveCloudInit(ctx context.Context, p *crawlv1alpha1.Proxy) (string, error) {
	ci := p.Spec.CloudInit
	if ci == nil {
		return "", nil
	}
	if ci.SecretRef == nil {
		return ci.UserData, nil
	}
	key := ci.SecretRef.KeyOrDefault()
	nn := types.NamespacedName{Namespace: p.Namespace, Name: ci.SecretRef.Name}
	var s corev1.Secret
	if err := r.Client.Get(ctx, nn, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", &CloudInitError{Secret: nn, Key: key, Err: errSecretNotVisible}
		}
		return "", fmt.Errorf("getting cloud-init secret %s: %w", nn, err)
	}
	if s.Labels[crawlv1alpha1.CloudInitSecretLabel] != "true" {
		return "", &CloudInitError{Secret: nn, Key: key, Err: errSecretNotVisible}
	}
	data, ok := s.Data[key]
	if !ok {
		return "", &CloudInitError{Secret: nn, Key: key, Err: fmt.Errorf("key %q not present", key)}
	}
	return string(data), nil
}

// cloudInitSecretOf names the Secret key p's user data comes from (nil when
// inline or none), so that a provider can mount it instead of copying it.
func cloudInitSecretOf(p *crawlv1alpha1.Proxy) *provider.SecretKeyRef {
	ci := p.Spec.CloudInit
	if ci == nil || ci.SecretRef == nil {
		return nil
	}
	return &provider.SecretKeyRef{Name: ci.SecretRef.Name, Key: ci.SecretRef.KeyOrDefault()}
}
