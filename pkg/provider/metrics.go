package provider

import (
	"context"
)

// RequestRecorder receives one observation per provider call. The metrics
// package satisfies it structurally (proxy_operator_provider_requests_total{provider,op,result});
// defining it here keeps this package free of any metrics library.
type RequestRecorder interface {
	// ProviderRequest records a call: provider is the registry name, op one
	// of the Op constants, result ResultSuccess or a class name
	// (ClassNameNotFound, …). It must not block.
	ProviderRequest(provider, op, result string)
}

// ResultSuccess is the result label of a call that returned a nil error.
const ResultSuccess = "success"

// WithMetrics returns p decorated to record every call on rec under name.
// Results are ResultSuccess or ClassName(err); return values pass through
// unchanged. Because Delete of a missing instance returns nil, it counts as a
// success. A nil rec returns p undecorated.
func WithMetrics(name string, p Provider, rec RequestRecorder) Provider {
	if rec == nil {
		return p
	}
	return &metricsProvider{name: name, next: p, rec: rec}
}

// MetricsWrapper adapts WithMetrics to a registry Wrapper.
func MetricsWrapper(rec RequestRecorder) Wrapper {
	return func(name string, p Provider) Provider { return WithMetrics(name, p, rec) }
}

type metricsProvider struct {
	name string
	next Provider
	rec  RequestRecorder
}

var _ Provider = (*metricsProvider)(nil)

func (m *metricsProvider) record(op string, err error) {
	result := ResultSuccess
	if err != nil {
		result = ClassName(err)
	}
	m.rec.ProviderRequest(m.name, op, result)
}

func (m *metricsProvider) Create(ctx context.Context, req CreateRequest) (string, error) {
	id, err := m.next.Create(ctx, req)
	m.record(OpCreate, err)
	return id, err
}

func (m *metricsProvider) Get(ctx context.Context, providerID string) (*Instance, error) {
	inst, err := m.next.Get(ctx, providerID)
	m.record(OpGet, err)
	return inst, err
}

func (m *metricsProvider) Delete(ctx context.Context, providerID string) error {
	err := m.next.Delete(ctx, providerID)
	m.record(OpDelete, err)
	return err
}

func (m *metricsProvider) ListByTag(ctx context.Context, tag string) ([]Instance, error) {
	insts, err := m.next.ListByTag(ctx, tag)
	m.record(OpList, err)
	return insts, err
}
