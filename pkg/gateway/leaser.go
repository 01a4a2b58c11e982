package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// Leaser leases proxies as a client's token may. Errors are the lease API's
// (*client.APIError, by code) or say it could not be reached.
type Leaser interface {
	// Acquire grants a lease as req asks, to the identity of token.
	Acquire(ctx context.Context, token string, req wire.AcquireRequest) (*wire.Lease, error)
	// Release ends a lease of token's identity.
	Release(ctx context.Context, token, leaseID string) error
	// Report reports result for target through a lease of token's identity.
	Report(ctx context.Context, token, leaseID, result, target string) error
	// Renew extends a lease of token's identity by ttl from now; the answer
	// carries new proxy credentials.
	Renew(ctx context.Context, token, leaseID string, ttl time.Duration) (*wire.Lease, error)
	// GetFor shows a lease of token's identity, its CoolingUntil set while
	// its proxy cools for target.
	GetFor(ctx context.Context, token, leaseID, target string) (*wire.Lease, error)
}

// APILeaser is the Leaser of the HTTP lease API at BaseURL (the Service in
// front of the replicas, which routes to the one that leads), reached
// through HTTPClient with each client's own token.
type APILeaser struct {
	BaseURL    string
	HTTPClient *http.Client
}

var _ Leaser = (*APILeaser)(nil)

func (a *APILeaser) client(token string) (*client.Client, error) {
	c, err := client.New(a.BaseURL, token, client.WithHTTPClient(a.HTTPClient), client.WithUserAgent("proxy-operator-gateway"))
	if err != nil {
		return nil, fmt.Errorf("gateway: lease API client: %w", err)
	}
	return c, nil
}

// Acquire implements Leaser.
func (a *APILeaser) Acquire(ctx context.Context, token string, req wire.AcquireRequest) (*wire.Lease, error) {
	c, err := a.client(token)
	if err != nil {
		return nil, err
	}
	return c.Acquire(ctx, req)
}

// Release implements Leaser.
func (a *APILeaser) Release(ctx context.Context, token, leaseID string) error {
	c, err := a.client(token)
	if err != nil {
		return err
	}
	return c.Release(ctx, leaseID)
}

// Report implements Leaser.
func (a *APILeaser) Report(ctx context.Context, token, leaseID, result, target string) error {
	c, err := a.client(token)
	if err != nil {
		return err
	}
	return c.Report(ctx, leaseID, result, target)
}

// Renew implements Leaser.
func (a *APILeaser) Renew(ctx context.Context, token, leaseID string, ttl time.Duration) (*wire.Lease, error) {
	c, err := a.client(token)
	if err != nil {
		return nil, err
	}
	return c.Renew(ctx, leaseID, ttl)
}

// GetFor implements Leaser.
func (a *APILeaser) GetFor(ctx context.Context, token, leaseID, target string) (*wire.Lease, error) {
	c, err := a.client(token)
	if err != nil {
		return nil, err
	}
	return c.GetFor(ctx, leaseID, target)
}
