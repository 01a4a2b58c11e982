package kubernetes

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// classify turns an error of the Kubernetes API into a provider error of the
// right class, tagged with op. nil stays nil.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	return provider.NewError(classOf(err), op, err)
}

// classOf decides the class of an API error.
func classOf(err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return provider.ErrNotFound
	case apierrors.IsForbidden(err):
		// Permanent, although an exhausted ResourceQuota is also a 403: in
		// apierrors it is indistinguishable from an RBAC denial (or a
		// terminating namespace). Not hammering an API server that may
		// never allow the request is the safer default; the price is that
		// a real quota 403 forgoes the gentler quota backoff.
		return provider.ErrPermanent
	case apierrors.IsInvalid(err), // 422: the pod spec is wrong
		apierrors.IsBadRequest(err),
		apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err),
		apierrors.IsUnsupportedMediaType(err),
		apierrors.IsRequestEntityTooLargeError(err): // e.g. huge cloud-init data
		return provider.ErrPermanent
	default:
		// 409 conflicts, 429, 5xx, timeouts, network errors, 401 (client-go
		// refreshes rotated credentials, so the next try may pass) and
		// anything unrecognised: retry with backoff.
		return provider.ErrTransient
	}
}
