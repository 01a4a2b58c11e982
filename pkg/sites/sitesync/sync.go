package sitesync

import (
	"maps"
	"slices"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// Store is where the policies go: *lease.Store.
type Store interface {
	// SetSitePolicies replaces every policy, and returns the ones left out
	// or partly applied, and why.
	SetSitePolicies([]sites.Policy) map[string]string
	// SiteStatuses are the budgets' states now.
	SiteStatuses() []sites.Status
}

// Sync is an informer event handler for *crawlv1alpha1.SitePolicy that
// hands the store every policy at each change (they are few: each change
// rebuilds the table, keeping the adapted limits).
type Sync struct {
	store Store

	mu        sync.Mutex
	policies  map[string]sites.Policy
	conflicts map[string]string
}

var _ toolscache.ResourceEventHandler = (*Sync)(nil)

// NewSync returns a handler feeding store.
func NewSync(store Store) *Sync {
	return &Sync{store: store, policies: map[string]sites.Policy{}, conflicts: map[string]string{}}
}

// OnAdd applies the policy.
func (s *Sync) OnAdd(obj any, _ bool) {
	if sp, ok := obj.(*crawlv1alpha1.SitePolicy); ok {
		s.set(sp.Name, new(sites.FromSitePolicy(sp)))
	}
}

// OnUpdate applies the new version.
func (s *Sync) OnUpdate(_, newObj any) { s.OnAdd(newObj, false) }

// OnDelete drops the policy.
func (s *Sync) OnDelete(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if sp, ok := obj.(*crawlv1alpha1.SitePolicy); ok {
		s.set(sp.Name, nil)
	}
}

func (s *Sync) set(name string, p *sites.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == nil {
		delete(s.policies, name)
	} else {
		s.policies[name] = *p
	}
	all := slices.Collect(maps.Values(s.policies))
	s.conflicts = s.store.SetSitePolicies(all)
}

// Conflict is why the store does not apply policy name in full ("": it
// does, or it does not know the policy).
func (s *Sync) Conflict(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conflicts[name]
}
