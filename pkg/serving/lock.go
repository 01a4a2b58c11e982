package serving

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrNotReady is what a ReadyLock answers an attempt to take leadership
// with while its pod is not Ready; the elector tries again each retry
// period.
var ErrNotReady = errors.New("this replica's pod is not Ready yet: not taking leadership")

// IsNotReady reports whether err is (or wraps) ErrNotReady.
func IsNotReady(err error) bool { return errors.Is(err, ErrNotReady) }

// ReadyLock wraps a replica's leader-election lock so that it takes
// leadership only while its own pod is Ready (ready says). The lease APIs'
// Services route to the pod with the serving label, which Decide gives only
// to a Ready pod; a replica that won the election before its readiness
// probe passed (a drain starts the replacement pod while the leader hands
// over) would lead where no request reaches it, and clients would meet the
// standby successor's 503 until the probe passed (10 s, seen in
// test/e2e/ha). The replica that is Ready takes the lock instead. Once
// held, renewals are never held back: a leader whose pod turns unready
// keeps leading until it is told to stop.
//
// ready's errors: NotFound or Forbidden (no pod to read: an install without
// the pods RBAC) let the attempt through, as without the gate; any other
// holds it back until the next retry.
func ReadyLock(lock resourcelock.Interface, ready func(context.Context) (bool, error)) resourcelock.Interface {
	return &readyLock{Interface: lock, ready: ready}
}

type readyLock struct {
	resourcelock.Interface
	ready func(context.Context) (bool, error)
	held  atomic.Bool
}

func (l *readyLock) gate(ctx context.Context) error {
	if l.held.Load() {
		return nil
	}
	ok, err := l.ready(ctx)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading this replica's pod: %w", err)
	case !ok:
		return ErrNotReady
	}
	return nil
}

// Create takes a lock nobody held, once the pod is Ready.
func (l *readyLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.gate(ctx); err != nil {
		return err
	}
	if err := l.Interface.Create(ctx, ler); err != nil {
		return err
	}
	l.held.Store(ler.HolderIdentity == l.Identity())
	return nil
}

// Update takes over a free or expired lock once the pod is Ready, and
// renews (or releases) a held one at any time.
func (l *readyLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.gate(ctx); err != nil {
		return err
	}
	if err := l.Interface.Update(ctx, ler); err != nil {
		return err
	}
	l.held.Store(ler.HolderIdentity == l.Identity())
	return nil
}

// PodReady reads whether pod namespace/name is Ready.
func PodReady(pods corev1client.PodsGetter, namespace, name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		p, err := pods.Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return isReady(p), nil
	}
}

// LockOptions say which Lease a replica in a pod campaigns for.
type LockOptions struct {
	// Namespace and Name of the leader-election Lease.
	Namespace, Name string
	// PodName and PodNamespace are this replica's pod.
	PodName, PodNamespace string
	// RenewDeadline bounds each request (half of it, as controller-runtime).
	RenewDeadline time.Duration
}

// NewLock is the Lease lock controller-runtime would make (identity
// <hostname>_<uuid>, its client's timeout), behind ReadyLock.
func NewLock(cfg *rest.Config, o LockOptions) (resourcelock.Interface, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("leader-election identity: %w", err)
	}
	cfg = rest.AddUserAgent(cfg, "leader-election")
	cfg.Timeout = max(o.RenewDeadline/2, time.Second)
	coord, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader-election client: %w", err)
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader-election client: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Client:     coord,
		LockConfig: resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())},
	}
	return ReadyLock(lock, PodReady(core, o.PodNamespace, o.PodName)), nil
}
