package discovery

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// CacheLister lists Proxies from a controller-runtime reader (the manager
// cache). Use it instead of the lease store when the listing must reflect
// the cache even before the store has been fed.
type CacheLister struct {
	Reader client.Reader
}

var _ Lister = CacheLister{}

// ListProxies lists Proxies of namespace ("" = all) and converts them.
func (c CacheLister) ListProxies(ctx context.Context, namespace string) ([]leasing.ProxyInfo, error) {
	var list crawlv1alpha1.ProxyList
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := c.Reader.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("listing proxies: %w", err)
	}
	out := make([]leasing.ProxyInfo, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, leasing.ProxyInfoFromProxy(&list.Items[i]))
	}
	return out, nil
}
