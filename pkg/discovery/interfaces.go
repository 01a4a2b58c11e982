package discovery

import (
	"context"

	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// Lister reads the fleet for GET /v1/proxies; by default the leasing
// Service's view (the store, fed from the manager cache), and CacheLister
// reads the cache directly.
type Lister interface {
	// ListProxies returns the proxies of namespace ("" = every namespace).
	// An error means the fleet cannot be read now (the server answers 503).
	ListProxies(ctx context.Context, namespace string) ([]leasing.ProxyInfo, error)
}

type listerFunc func(ctx context.Context, namespace string) ([]leasing.ProxyInfo, error)

func (f listerFunc) ListProxies(ctx context.Context, namespace string) ([]leasing.ProxyInfo, error) {
	return f(ctx, namespace)
}
