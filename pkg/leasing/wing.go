package leasing

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/pkg/sites/sitesync"
)

// WingConfig is what the operator's lease wing is built from: each part's
// options, and the clients and hooks they use.
type WingConfig struct {
	// Options are the store's and the queue's.
	Options Options
	// IDs, when enabled, signs lease IDs so that leases a crash lost since
	// the last checkpoint are taken back (its Secret in the operator's
	// namespace).
	IDs leaseid.Options
	// Checkpoint, when enabled, keeps the leases across restarts and
	// handovers (in the operator's namespace).
	Checkpoint checkpoint.Options
	// Codec carries the lease APIs' metadata of each lease through the
	// checkpoint (nil: none).
	Codec checkpoint.ExtraCodec
	// Recorder counts the checkpoint's writes.
	Recorder checkpoint.Recorder
	// Secrets reads and writes the signing key's and the checkpoint's
	// Secrets: an uncached client (the operator must not cache every
	// Secret of the cluster).
	Secrets corev1client.SecretsGetter
	// Leader names the replica that leads, for a standby's not_leader
	// answers (LeaseHolder); nil: every replica serves (no leader election).
	Leader func(context.Context) string
	// Auth, when set, mints the credentials of each lease's proxy.
	Auth ProxyAuth
	// Clock drives the store, the queue and the Gate's reads.
	Clock Clock
}

// Wing is the lease path of one operator replica: the store with the wait
// queue in front of it (Leasing), the Gate that only the replica that leads
// opens once it has taken the leases over, the signed lease IDs and the
// checkpoint. The lease APIs take their Services from it (Leasing.Service);
// Register adds it to a manager.
type Wing struct {
	*Leasing

	cfg        WingConfig
	signer     *leaseid.Signer
	checkpoint *checkpoint.Checkpointer
	restored   func(rvBase uint64)
}

// NewWing builds the wing of cfg; nothing runs until Register's manager
// starts.
func NewWing(cfg WingConfig) (*Wing, error) {
	w := &Wing{cfg: cfg}
	storeOpts := cfg.Options.StoreOptions()
	if cfg.IDs.Enabled() {
		w.signer = leaseid.NewSigner()
		storeOpts.IDs = w.signer
	}
	store, err := lease.New(storeOpts, cfg.Clock)
	if err != nil {
		return nil, fmt.Errorf("creating lease store: %w", err)
	}
	w.Leasing = NewWithStore(store, cfg.Options, cfg.Clock)
	if w.signer != nil {
		w.IDs = w.signer
	}
	w.Auth = cfg.Auth
	w.Gate = NewGate(cfg.Leader)
	if cfg.Checkpoint.Enabled() {
		w.checkpoint, err = checkpoint.New(cfg.Checkpoint, checkpoint.Deps{Secrets: cfg.Secrets, Store: store, Codec: cfg.Codec, Recorder: cfg.Recorder})
		if err != nil {
			return nil, err
		}
	}
	return w, nil
}

// FinalAfter makes the last checkpoint wait until stopped is closed: a lease
// server's, once it takes no more requests, so that the checkpoint holds
// every change it made.
func (w *Wing) FinalAfter(stopped <-chan struct{}) {
	if w.checkpoint != nil {
		w.checkpoint.FinalAfter(stopped)
	}
}

// OnRestored makes fn learn the resourceVersion base of the leases the
// takeover loaded (the ProxyLease API's watch cache starts after it). Call
// it before the manager starts.
func (w *Wing) OnRestored(fn func(rvBase uint64)) { w.restored = fn }

// Register adds the wing to mgr: the store fed by the manager's Proxy
// informer; the store's and the queue's runnables through add (which may
// hold their stop until the pod has left the lease APIs' Services); their
// collectors on reg; the Takeover, which on the replica that leads loads
// the signing key and the checkpoint, opens the Gate and runs the
// checkpoint writer, and once this replica stops serving freezes the store
// (the last checkpoint then holds every change); and /readyz/leases, which
// only the serving replica passes. Wait on the Takeover after the manager
// returns: it ends with the last checkpoint.
func (w *Wing) Register(ctx context.Context, mgr manager.Manager, add func(manager.Runnable) error, reg prometheus.Registerer) (*Takeover, error) {
	inf, err := mgr.GetCache().GetInformer(ctx, &crawlv1alpha1.Proxy{})
	if err != nil {
		return nil, fmt.Errorf("getting the Proxy informer for the lease store: %w", err)
	}
	if _, err := inf.AddEventHandler(lease.NewProxySync(w.Store)); err != nil {
		return nil, fmt.Errorf("feeding the lease store from the Proxy informer: %w", err)
	}
	spInf, err := mgr.GetCache().GetInformer(ctx, &crawlv1alpha1.SitePolicy{})
	if err != nil {
		return nil, fmt.Errorf("getting the SitePolicy informer for the lease store: %w", err)
	}
	policies := sitesync.NewSync(w.Store)
	if _, err := spInf.AddEventHandler(policies); err != nil {
		return nil, fmt.Errorf("feeding the lease store from the SitePolicy informer: %w", err)
	}
	if err := mgr.Add(&sitesync.Status{Client: mgr.GetClient(), Store: w.Store, Sync: policies, Clock: w.cfg.Clock,
		Interval: sitesync.DefaultStatusInterval}); err != nil {
		return nil, fmt.Errorf("adding the SitePolicy status writer: %w", err)
	}
	for _, r := range w.Runnables() {
		if err := add(r); err != nil {
			return nil, fmt.Errorf("adding the lease store and queue: %w", err)
		}
	}
	for _, c := range w.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering lease metrics: %w", err)
		}
	}
	takeover := &Takeover{Gate: w.Gate, Stop: w.Store.Freeze}
	var steps []func(context.Context) error
	if w.signer != nil {
		steps = append(steps, func(ctx context.Context) error { return w.signer.LoadKey(ctx, w.cfg.Secrets, w.cfg.IDs) })
	}
	if cp := w.checkpoint; cp != nil {
		steps = append(steps, func(ctx context.Context) error {
			return cp.TakeOver(ctx, mgr.GetCache().WaitForCacheSync, w.restored)
		})
		takeover.Run = cp.Start
	}
	takeover.Prepare = Steps(steps...)
	if err := mgr.Add(takeover); err != nil {
		return nil, fmt.Errorf("adding the lease takeover: %w", err)
	}
	// Not part of the pod's readinessProbe: both replicas are Ready, and the
	// lease APIs' Services select the serving pod by its label.
	if err := mgr.AddReadyzCheck("leases", func(*http.Request) error {
		if !w.Gate.IsOpen() {
			return errors.New("not serving leases: a standby, or loading the lease checkpoint")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding the leases readyz check: %w", err)
	}
	return takeover, nil
}
