package discovery

import (
	"context"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// fakeMetrics records every outcome.
type fakeMetrics struct {
	mu       sync.Mutex
	outcomes []string
}

var _ leasing.Recorder = (*fakeMetrics)(nil)

// LeaseRequest records the outcome; every request of these tests comes
// through the HTTP door.
func (m *fakeMetrics) LeaseRequest(api, outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if api != leasing.APIHTTP {
		outcome = api + ":" + outcome
	}
	m.outcomes = append(m.outcomes, outcome)
}

func (m *fakeMetrics) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.outcomes
	m.outcomes = nil
	return out
}

// fakeLister wraps a Lister; it can inject the next error or a panic.
type fakeLister struct {
	inner     Lister
	mu        sync.Mutex
	nextErr   error
	nextPanic bool
	calls     []string
}

var _ Lister = (*fakeLister)(nil)

func (f *fakeLister) ListProxies(ctx context.Context, namespace string) ([]lease.ProxyInfo, error) {
	f.mu.Lock()
	f.calls = append(f.calls, namespace)
	err, p := f.nextErr, f.nextPanic
	f.nextErr, f.nextPanic = nil, false
	f.mu.Unlock()
	if p {
		panic("injected lister panic")
	}
	if err != nil {
		return nil, err
	}
	return f.inner.ListProxies(ctx, namespace)
}

// newService is the HTTP API's leasing service over store and q, with the
// operator's default longest wait.
func newService(tb testing.TB, store *lease.Store, q leasing.Queue, clk clock.PassiveClock, rec leasing.Recorder) *leasing.Service {
	tb.Helper()
	svc, err := leasing.NewService(leasing.APIHTTP, DefaultMaxWait, leasing.ServiceDeps{Store: store, Queue: q, Clock: clk, Recorder: rec,
		Priorities: leasing.PriorityGrants{"token:" + DefaultIdentity: 5}})
	if err != nil {
		tb.Fatal(err)
	}
	return svc
}

// realService is the HTTP API's leasing service with the real wait queue
// in front of store, as the operator runs it.
func realService(tb testing.TB, store *lease.Store) *leasing.Service {
	tb.Helper()
	l := leasing.NewWithStore(store, leasing.DefaultOptions(), clock.RealClock{})
	tb.Cleanup(func() { _ = l.Shutdown(context.Background()) })
	svc, err := l.Service(leasing.APIHTTP, DefaultMaxWait, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return svc
}

// staticCert is a managed certificate source standing in for certs.Manager.
type staticCert struct{ cert, key []byte }

var _ dynamiccertificates.CertKeyContentProvider = (*staticCert)(nil)

func (s *staticCert) Name() string                             { return "static" }
func (s *staticCert) CurrentCertKeyContent() ([]byte, []byte)  { return s.cert, s.key }
func (s *staticCert) AddListener(dynamiccertificates.Listener) {}

// providerOrNil keeps a nil *staticCert a nil interface.
func providerOrNil(s *staticCert) dynamiccertificates.CertKeyContentProvider {
	if s == nil {
		return nil
	}
	return s
}
