package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Deps are what a Manager talks to.
type Deps struct {
	// Kube reads and writes the Secret and the CA ConfigMap (uncached).
	Kube kubernetes.Interface
	// Dynamic patches the APIService's caBundle.
	Dynamic dynamic.Interface
	// Clock decides what is due; nil means the real clock.
	Clock clock.WithTicker
}

// Manager keeps the operator's CA and serving certificate in one Secret,
// renews them when due, publishes the CA bundle and serves the current pair.
// Every replica runs one (NeedLeaderElection is false): each must serve the
// current certificate, and writes are guarded by the Secret's
// resourceVersion, so two replicas never both renew.
type Manager struct {
	opts   Options
	ns     string
	policy policy
	deps   Deps
	clock  clock.WithTicker

	mu        sync.Mutex
	current   *state
	listeners []dynamiccertificates.Listener
}

var _ dynamiccertificates.CertKeyContentProvider = (*Manager)(nil)

// ManagedByLabel marks the objects a Manager writes.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// managedBy is ManagedByLabel's value.
const managedBy = "proxy-operator"

// NewManager validates opts; it reads nothing until Ensure.
func NewManager(opts Options, deps Deps) (*Manager, error) {
	if !opts.Enabled() {
		return nil, errors.New("certs: --serving-cert-secret is unset; do not build a Manager")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if deps.Kube == nil || (opts.APIService != "" && deps.Dynamic == nil) {
		return nil, errors.New("certs: Deps.Kube (and Deps.Dynamic with an APIService) are required")
	}
	ns := opts.Namespace
	clk := deps.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Manager{
		opts: opts, ns: ns, deps: deps, clock: clk,
		policy: policy{
			caName:       "proxy-operator-ca@" + ns,
			hosts:        opts.hosts(ns),
			caValidity:   opts.CAValidity,
			certValidity: opts.CertValidity,
		},
	}, nil
}

// Ensure reads the Secret (creating it if missing), renews what is due,
// makes the result current and publishes the CA bundle. Run it once before
// the servers start, so that they never serve without a certificate.
func (m *Manager) Ensure(ctx context.Context) error {
	var lastErr error
	for range 3 { // a conflict with another replica's write: read it again
		st, err := m.sync(ctx)
		if err == nil {
			m.setCurrent(st)
			return m.publish(ctx, st.bundlePEM())
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return err
		}
		lastErr = err
	}
	return fmt.Errorf("certs: the Secret kept changing under us: %w", lastErr)
}

// sync brings the Secret up to date and returns what it holds.
func (m *Manager) sync(ctx context.Context) (*state, error) {
	logger := log.FromContext(ctx)
	secrets := m.deps.Kube.CoreV1().Secrets(m.ns)
	secret, err := secrets.Get(ctx, m.opts.SecretName, metav1.GetOptions{})
	var cur *state
	switch {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s/%s: %w", m.ns, m.opts.SecretName, err)
	default:
		if cur, err = parseState(secret.Data); err != nil {
			// Unreadable (edited by hand, truncated): issue anew rather than
			// serve nothing; clients follow through the published bundle.
			logger.Error(err, "certificate Secret unreadable; issuing new certificates", "secret", m.opts.SecretName)
			cur = nil
		}
	}
	next, reasons, err := m.policy.renew(cur, m.clock.Now())
	if err != nil {
		return nil, err
	}
	if len(reasons) == 0 {
		return cur, nil
	}
	if secret == nil {
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name: m.opts.SecretName, Namespace: m.ns,
			Labels: map[string]string{ManagedByLabel: managedBy},
		}, Type: corev1.SecretTypeTLS, Data: next.data()}
		if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", m.ns, m.opts.SecretName, err)
		}
	} else {
		secret = secret.DeepCopy()
		secret.Data = next.data()
		if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("updating Secret %s/%s: %w", m.ns, m.opts.SecretName, err)
		}
	}
	logger.Info("serving certificate issued", "secret", m.opts.SecretName, "reasons", reasons,
		"expires", next.serving.Cert.NotAfter.UTC(), "caExpires", next.ca.Cert.NotAfter.UTC())
	return next, nil
}

// setCurrent makes st current and tells the listeners when the serving pair
// changed.
func (m *Manager) setCurrent(st *state) {
	m.mu.Lock()
	changed := m.current == nil || !bytes.Equal(m.current.serving.CertPEM, st.serving.CertPEM)
	m.current = st
	listeners := m.listeners
	m.mu.Unlock()
	if changed {
		for _, l := range listeners {
			l.Enqueue()
		}
	}
}

// Start re-runs Ensure every ResyncInterval, and when something falls due,
// until ctx ends (controller-runtime Runnable). Errors are logged and retried.
func (m *Manager) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("certs")
	ctx = log.IntoContext(ctx, logger)
	for {
		wait := m.opts.ResyncInterval
		m.mu.Lock()
		if m.current != nil {
			if d := m.current.nextRenewal().Sub(m.clock.Now()); d < wait {
				wait = max(d, 0)
			}
		}
		m.mu.Unlock()
		t := m.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		if err := m.Ensure(ctx); err != nil {
			logger.Error(err, "keeping the serving certificate current; retrying", "in", m.opts.ResyncInterval)
		}
	}
}

// NeedLeaderElection is false: every replica serves the certificate.
func (m *Manager) NeedLeaderElection() bool { return false }

// Name implements dynamiccertificates.CertKeyContentProvider.
func (m *Manager) Name() string { return "secret/" + m.ns + "/" + m.opts.SecretName }

// CurrentCertKeyContent is the serving pair (nil before the first Ensure).
func (m *Manager) CurrentCertKeyContent() ([]byte, []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current == nil {
		return nil, nil
	}
	return m.current.serving.CertPEM, m.current.serving.KeyPEM
}

// AddListener is told whenever the serving pair changes.
func (m *Manager) AddListener(l dynamiccertificates.Listener) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listeners = append(m.listeners, l)
}

// CABundle is the PEM bundle clients must trust (nil before Ensure).
func (m *Manager) CABundle() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current == nil {
		return nil
	}
	return m.current.bundlePEM()
}

// NotAfter is when the current serving certificate expires.
func (m *Manager) NotAfter() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current == nil {
		return time.Time{}
	}
	return m.current.serving.Cert.NotAfter
}

// NewEnsuredManager is the Manager of opts on cfg, kube and a dynamic
// client of cfg, its Secret brought up to date (Ensure) before it returns,
// so that no server starts without its certificate. Run it as a Runnable
// to keep the certificate current.
func NewEnsuredManager(ctx context.Context, opts Options, cfg *rest.Config, kube kubernetes.Interface) (*Manager, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("serving certificate client: %w", err)
	}
	m, err := NewManager(opts, Deps{Kube: kube, Dynamic: dyn})
	if err != nil {
		return nil, err
	}
	if err := m.Ensure(ctx); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return m, nil
}
