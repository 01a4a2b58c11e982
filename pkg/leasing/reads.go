package leasing

import (
	"context"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// The Service's reads: each answers a request, so each checks the gate
// first (a standby's store is empty), except the feed a watch cache is built
// on, which answers none.

// Get returns a live lease of holder as it is now. Errors: ReasonNotFound,
// ReasonEnded, ReasonForbidden.
func (s *Service) Get(holder, id string) (lease.Lease, error) {
	if err := s.gate.check(context.Background()); err != nil {
		return lease.Lease{}, err
	}
	l, err := s.store.GetAs(holder, id)
	return l, storeError(id, err)
}

// CoolingFor is when the proxy of holder's live lease id stops cooling for
// target, the zero time when it does not (lease.Store.CoolingAs). Errors:
// ReasonInvalid (a malformed target), Get's.
func (s *Service) CoolingFor(holder, id, target string) (time.Time, error) {
	if err := checkTarget(id, target); err != nil {
		return time.Time{}, err
	}
	if err := s.gate.check(context.Background()); err != nil {
		return time.Time{}, err
	}
	until, err := s.store.CoolingAs(holder, id, target)
	return until, storeError(id, err)
}

// GetByName returns the live lease of namespace/name (for an API whose
// authorization was decided elsewhere). Errors: ReasonNotLeader.
func (s *Service) GetByName(ctx context.Context, namespace, name string) (Lease, bool, error) {
	if err := s.gate.check(ctx); err != nil {
		return Lease{}, false, err
	}
	l, ok := s.store.GetByName(namespace, name)
	return l, ok, nil
}

// Reportable reports whether namespace/name is a lease that takes reports:
// a live one, or one that ended within the cooldown window. Errors:
// ReasonNotLeader.
func (s *Service) Reportable(ctx context.Context, namespace, name string) (bool, error) {
	if err := s.gate.check(ctx); err != nil {
		return false, err
	}
	_, _, ok := s.store.LookupName(namespace, name)
	return ok, nil
}

// List returns the live leases of namespace ("" = all) and the store
// revision they reflect. Errors: ReasonNotLeader.
func (s *Service) List(ctx context.Context, namespace string) ([]Lease, uint64, error) {
	if err := s.gate.check(ctx); err != nil {
		return nil, 0, err
	}
	leases, rev := s.store.Snapshot(namespace)
	return leases, rev, nil
}

// Revision is the store revision of the last change (a List's, at most).
// Errors: ReasonNotLeader.
func (s *Service) Revision(ctx context.Context) (uint64, error) {
	if err := s.gate.check(ctx); err != nil {
		return 0, err
	}
	return s.store.Revision(), nil
}

// Counts returns the live leases per proxy. Errors: ReasonNotLeader (a
// standby's store holds no leases: every count would read 0).
func (s *Service) Counts(ctx context.Context) (map[ProxyKey]int, error) {
	if err := s.gate.check(ctx); err != nil {
		return nil, err
	}
	return s.store.Counts(), nil
}

// Proxies returns the fleet of namespace ("" = every namespace) as the
// store sees it. Errors: ReasonNotLeader.
func (s *Service) Proxies(ctx context.Context, namespace string) ([]ProxyInfo, error) {
	if err := s.gate.check(ctx); err != nil {
		return nil, err
	}
	return s.store.ListProxies(ctx, namespace)
}

// Watch feeds fn every lease event in revision order, synchronously and
// without the store lock; fn must not call the service. Subscribe before
// List to see every change exactly once. It is a feed, not an answer, so it
// is not gated: a watch cache subscribes on every replica, and what it
// serves comes after a gated List or Revision.
func (s *Service) Watch(fn func(Event)) (cancel func()) { return s.store.Subscribe(fn) }

// FeedRevision is Revision for a feed built on Watch, before this replica
// serves (a watch cache at its start and after a checkpoint is loaded); it
// answers no request, so it is not gated.
func (s *Service) FeedRevision() uint64 { return s.store.Revision() }
