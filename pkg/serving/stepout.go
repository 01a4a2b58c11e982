package serving

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// stepOut runs once Start's context has ended, while the servers Hold wraps
// still listen: it takes this pod out of the lease APIs' Services as StepOut
// says (waiting up to SuccessorWait for the successor's label), then waits
// ShutdownDelay for kube-proxy and kube-apiserver to drop the endpoint. Only
// then may the servers stop listening: a labelled pod's endpoint outlives
// its process (the label, not readiness, routes those Services), so servers
// that stopped first would refuse the connections still sent to it, and one
// refused availability check turns the APIService unavailable.
func (l *Labeller) stepOut(ctx context.Context, lister corev1listers.PodNamespaceLister, kick <-chan struct{}, tick <-chan time.Time) {
	logger := log.FromContext(ctx)
	wait, cancel := context.WithTimeout(ctx, l.opts.SuccessorWait)
	defer cancel()
	giveUp := l.clock.NewTimer(l.opts.SuccessorWait)
	defer giveUp.Stop()
	// This pod as the API server has it: the stop may come before the
	// informer has seen its deletion (the kubelet's watch and ours race).
	// Only this step changes its label from now on. Unreadable: the cache's.
	self, err := l.kube.CoreV1().Pods(l.opts.Namespace).Get(wait, l.opts.PodName, metav1.GetOptions{})
	fresh := err == nil || apierrors.IsNotFound(err) // gone: so is its endpoint
	if !fresh {
		logger.Error(err, "reading this replica's pod at shutdown")
	}
	if err != nil {
		self = nil
	}
	for done := false; !done; {
		cached, peers, err := l.pods(lister)
		if err != nil {
			logger.Error(err, "listing the operator's pods")
		}
		if !fresh {
			self = cached
		}
		var change *Change
		done, change = StepOut(self, peers)
		if change != nil {
			if err := l.apply(wait, *change); err != nil {
				logger.Error(err, "removing the serving label at shutdown")
				done = false
			} else {
				logger.Info("left the lease APIs' Services to the successor", "target", change.Pod)
			}
		}
		if done {
			break
		}
		select {
		case <-kick:
		case <-tick:
		case <-giveUp.C():
			logger.Info("no live peer took the serving label: keeping it", "waited", l.opts.SuccessorWait)
			done = true
		}
	}
	if d := l.opts.ShutdownDelay; d > 0 {
		logger.Info("the servers keep listening while the Services drop this pod", "shutdownDelay", d)
		<-l.clock.After(d)
	}
}

// SteppedOut is closed once Start has returned: after stepping out at
// shutdown, or at once when it could not start.
func (l *Labeller) SteppedOut() <-chan struct{} { return l.stepped }

// Runnable is what Hold wraps: a controller-runtime Runnable.
type Runnable interface {
	Start(ctx context.Context) error
}

// Hold wraps a server of this replica (a lease API, the gateway) so that
// at shutdown its context ends only once this Labeller has stepped out
// (SteppedOut): it keeps answering while the Services stop sending it new
// connections. The Labeller must be added to the same manager.
func (l *Labeller) Hold(r Runnable) *Held { return &Held{r: r, out: l.stepped} }

// Held is a Runnable that Hold wrapped.
type Held struct {
	r   Runnable
	out <-chan struct{}
}

// Start runs the wrapped Runnable on a context that ends once ctx has ended
// and the Labeller has stepped out.
func (h *Held) Start(ctx context.Context) error {
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-inner.Done():
			return
		}
		select {
		case <-h.out:
		case <-inner.Done():
		}
		cancel()
	}()
	return h.r.Start(inner)
}

// NeedLeaderElection is the wrapped Runnable's (true, controller-runtime's
// default, when it does not say).
func (h *Held) NeedLeaderElection() bool {
	if le, ok := h.r.(interface{ NeedLeaderElection() bool }); ok {
		return le.NeedLeaderElection()
	}
	return true
}
