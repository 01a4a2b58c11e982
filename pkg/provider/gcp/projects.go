package gcp

import (
	"context"
	"fmt"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// listProjects is what ListByTag covers: the default project, every project
// a Create named since start, and every project a gcp Proxy names (one being
// deleted included). An unreadable Proxy list is a transient error: a
// listing that silently left a project out would hide its orphans.
func (p *Provider) listProjects(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	p.mu.Lock()
	for pr := range p.projects {
		set[pr] = true
	}
	p.mu.Unlock()
	if p.proxies != nil {
		var proxies crawlv1alpha1.ProxyList
		if err := p.proxies.List(ctx, &proxies, client.UnsafeDisableDeepCopy); err != nil {
			return nil, provider.NewError(provider.ErrTransient, provider.OpList, fmt.Errorf("listing Proxies for their projects: %w", err))
		}
		for i := range proxies.Items {
			spec := &proxies.Items[i].Spec
			if spec.Provider == Name && spec.GCP != nil && spec.GCP.Project != "" {
				set[spec.GCP.Project] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for pr := range set {
		out = append(out, pr)
	}
	slices.Sort(out)
	return out, nil
}
