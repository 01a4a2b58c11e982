package discovery

import (
	"context"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// InProcess is the lease API for a caller in the server's own process (the
// gateway on the replica that serves leases): each call takes a bearer
// token, checks it as the HTTP API does (identify), asks the leasing Service
// what the handler would, and answers with the handler's answer without
// HTTP or JSON: a lease as wire.Lease, a refusal as the *client.APIError the
// Go client decodes from the same answer off the network.
type InProcess struct{ s *Server }

// InProcess returns the in-process way to s's lease API.
func (s *Server) InProcess() *InProcess { return &InProcess{s: s} }

// Acquire is POST /v1/leases with token and req.
func (p *InProcess) Acquire(ctx context.Context, token string, req wire.AcquireRequest) (*wire.Lease, error) {
	tok, refused := p.s.identify(ctx, token)
	if refused != nil {
		return nil, refused.err()
	}
	if err := ValidateAcquireRequest(req); err != nil {
		p.s.opts.Service.Invalid()
		return nil, requestAnswer(err).err()
	}
	l, err := p.s.opts.Service.Acquire(ctx, acquireRequest(tok, req))
	if err != nil {
		return nil, p.refusal(ctx, http.MethodPost, err)
	}
	out := p.s.toWireLease(l)
	return &out, nil
}

// Release is DELETE /v1/leases/{leaseID} with token.
func (p *InProcess) Release(ctx context.Context, token, leaseID string) error {
	tok, refused := p.s.identify(ctx, token)
	if refused != nil {
		return refused.err()
	}
	if _, err := p.s.opts.Service.Release(holder(tok), leaseID); err != nil {
		return p.refusal(ctx, http.MethodDelete, err)
	}
	return nil
}

// Report is POST /v1/leases/{leaseID}/report with token.
func (p *InProcess) Report(ctx context.Context, token, leaseID, result, target string) error {
	tok, refused := p.s.identify(ctx, token)
	if refused != nil {
		return refused.err()
	}
	if err := validateReport(wire.ReportRequest{Result: result, Target: target}); err != nil {
		return requestAnswer(err).err()
	}
	if err := p.s.opts.Service.Report(holder(tok), leaseID, result, target); err != nil {
		return p.refusal(ctx, http.MethodPost, err)
	}
	return nil
}

// Renew is POST /v1/leases/{leaseID}/renew with token, for ttl in whole
// seconds as the Go client sends it.
func (p *InProcess) Renew(ctx context.Context, token, leaseID string, ttl time.Duration) (*wire.Lease, error) {
	tok, refused := p.s.identify(ctx, token)
	if refused != nil {
		return nil, refused.err()
	}
	l, err := p.s.opts.Service.Renew(holder(tok), leaseID, leasing.Seconds(int64(ttl/time.Second)))
	if err != nil {
		return nil, p.refusal(ctx, http.MethodPost, err)
	}
	out := p.s.toWireLease(l)
	return &out, nil
}

// GetFor is GET /v1/leases/{leaseID}?target=target with token.
func (p *InProcess) GetFor(ctx context.Context, token, leaseID, target string) (*wire.Lease, error) {
	tok, refused := p.s.identify(ctx, token)
	if refused != nil {
		return nil, refused.err()
	}
	out, err := p.s.leaseFor(holder(tok), leaseID, target)
	if err != nil {
		return nil, p.refusal(ctx, http.MethodGet, err)
	}
	return &out, nil
}

// refusal is a Service error as the caller gets it, logged when it is a
// bug (as the HTTP API's request log does).
func (p *InProcess) refusal(ctx context.Context, method string, err error) error {
	a := serviceAnswer(err)
	if a.status == http.StatusInternalServerError {
		log.FromContext(ctx).Error(err, "in-process lease request failed", "method", method)
	}
	return a.err()
}
