package gateway

import (
	"context"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// LocalAPI is the lease API as this process serves it, for a gateway on the
// replica that serves leases: there, the Service in front of the replicas
// would route the gateway's lease calls back to this process, through TLS
// and the network, twice per request or tunnel.
type LocalAPI struct {
	// Leaser is the API's in-process way in (discovery.Server.InProcess):
	// the network path's token check, identity and answers, without HTTP or
	// JSON.
	Leaser Leaser
	// Serving reports whether this replica serves leases now (the lease
	// gate: it leads and has loaded the leases).
	Serving func() bool
}

// localLeaser leases through local while local.Serving says this replica
// serves leases, and through remote (the API's Service) otherwise. A call
// that meets the leadership moving between the check and the service gets
// the service's not_leader answer (503 with Retry-After), as the network
// path does during a handover.
type localLeaser struct {
	local  LocalAPI
	remote Leaser
}

var _ Leaser = (*localLeaser)(nil)

func (l *localLeaser) pick() Leaser {
	if l.local.Serving() {
		return l.local.Leaser
	}
	return l.remote
}

// Acquire implements Leaser.
func (l *localLeaser) Acquire(ctx context.Context, token string, req wire.AcquireRequest) (*wire.Lease, error) {
	return l.pick().Acquire(ctx, token, req)
}

// Release implements Leaser.
func (l *localLeaser) Release(ctx context.Context, token, leaseID string) error {
	return l.pick().Release(ctx, token, leaseID)
}

// Report implements Leaser.
func (l *localLeaser) Report(ctx context.Context, token, leaseID, result, target string) error {
	return l.pick().Report(ctx, token, leaseID, result, target)
}

// GetFor implements Leaser.
func (l *localLeaser) GetFor(ctx context.Context, token, leaseID, target string) (*wire.Lease, error) {
	return l.pick().GetFor(ctx, token, leaseID, target)
}

// Renew implements Leaser.
func (l *localLeaser) Renew(ctx context.Context, token, leaseID string, ttl time.Duration) (*wire.Lease, error) {
	return l.pick().Renew(ctx, token, leaseID, ttl)
}
