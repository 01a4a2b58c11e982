package serving

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Options say which pods the Labeller looks after.
type Options struct {
	// Namespace is the operator's pods' namespace.
	Namespace string
	// PodName is this replica's own pod.
	PodName string
	// PodSelector selects the operator's pods (this one and its peers), as
	// a label selector string (--serving-pod-selector).
	PodSelector string
	// Resync is how often the rule is applied without a pod event: whether
	// this replica serves changes without one (default 1s).
	Resync time.Duration
	// ShutdownDelay is how long, at shutdown, the servers Hold keeps
	// listening after this pod stepped out of the lease APIs' Services
	// (--serving-shutdown-delay), so that kube-proxy and kube-apiserver stop
	// sending it new connections first.
	ShutdownDelay time.Duration
	// SuccessorWait bounds how long a labelled pod being deleted waits at
	// shutdown for a live peer to carry the label before it removes its own
	// (default 5s); after it, it keeps the label.
	SuccessorWait time.Duration
}

// DefaultPodSelector selects the pods of the shipped install
// (artifacts/operator, the Helm chart).
const DefaultPodSelector = "app.kubernetes.io/name=proxy-operator"

// DefaultShutdownDelay covers an EndpointSlice update and kube-proxy's
// next sync (--iptables-min-sync-period is 1s).
const DefaultShutdownDelay = 2 * time.Second

// MaxShutdownDelay keeps a pod's shutdown, with the last lease checkpoint's
// worst case, within the shipped terminationGracePeriodSeconds (180).
const MaxShutdownDelay = 20 * time.Second

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{PodSelector: DefaultPodSelector, Resync: time.Second, ShutdownDelay: DefaultShutdownDelay, SuccessorWait: 5 * time.Second}
}

// StepOutWorstCase is the longest a replica's shutdown waits before its
// servers stop: the wait for a successor, then ShutdownDelay.
func (o Options) StepOutWorstCase() time.Duration { return o.SuccessorWait + o.ShutdownDelay }

// AddFlags registers the flags of the options a user sets.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.PodSelector, "serving-pod-selector", o.PodSelector,
		"Label selector of the operator's own pods. In a pod ($POD_NAME set), the replica that serves leases labels its pod "+LabelKey+"="+LabelValue+" (and a standby its own while the leader's pod is deleted); the lease APIs' Services select on it.")
	fs.DurationVar(&o.ShutdownDelay, "serving-shutdown-delay", o.ShutdownDelay,
		"In a pod, how long the lease APIs' servers and the gateway keep listening at shutdown after the pod has left the lease APIs' Services (its serving label handed to the successor), so that kube-proxy and kube-apiserver stop sending it new connections first (as kube-apiserver's shutdown delay). It lengthens a handover by as much. 0 stops them at once; at most "+MaxShutdownDelay.String()+".")
}

// Validate names the first missing or malformed option.
func (o Options) Validate() error {
	if o.PodSelector == "" {
		return errors.New("--serving-pod-selector: a selector of the operator's pods is required")
	}
	sel, err := labels.Parse(o.PodSelector)
	if err != nil {
		return fmt.Errorf("--serving-pod-selector: %w", err)
	}
	if sel.Empty() {
		return errors.New("--serving-pod-selector: must select something (an empty selector matches every pod of the namespace)")
	}
	if o.ShutdownDelay < 0 || o.ShutdownDelay > MaxShutdownDelay {
		return fmt.Errorf("--serving-shutdown-delay: %s is outside [0s, %s]", o.ShutdownDelay, MaxShutdownDelay)
	}
	return nil
}

// Labeller is a Runnable of every replica (not leader-elected) that keeps
// LabelKey and LeaderAnnotation on the operator's pods as Decide says.
type Labeller struct {
	opts     Options
	selector labels.Selector
	kube     kubernetes.Interface
	serving  func() bool
	clock    clock.WithTicker
	// stepped closes when Start returns: after stepping out at shutdown,
	// or at once when it could not start.
	stepped chan struct{}
}

// LabellerOf is the Labeller of the replica in pod podName of namespace,
// with o's selector and delays; nil (no error) outside a pod (podName or
// namespace empty), where there is no pod to label.
func LabellerOf(o Options, namespace, podName string, kube kubernetes.Interface, serving func() bool, clk clock.WithTicker) (*Labeller, error) {
	if podName == "" || namespace == "" {
		return nil, nil
	}
	o.Namespace, o.PodName = namespace, podName
	return New(o, kube, serving, clk)
}

// New returns a Labeller; serving reports whether this replica serves leases
// now (the leasing gate is open).
// Namespace and PodName are required.
func New(o Options, kube kubernetes.Interface, serving func() bool, clk clock.WithTicker) (*Labeller, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Namespace == "" || o.PodName == "" {
		return nil, errors.New("serving labeller: the operator's namespace and pod name are required")
	}
	sel, err := labels.Parse(o.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("--serving-pod-selector: %w", err)
	}
	if o.Resync <= 0 {
		o.Resync = time.Second
	}
	if o.SuccessorWait <= 0 {
		o.SuccessorWait = NewOptions().SuccessorWait
	}
	return &Labeller{opts: o, selector: sel, kube: kube, serving: serving, clock: clk, stepped: make(chan struct{})}, nil
}

// NeedLeaderElection is false: the standby labels itself as successor.
func (l *Labeller) NeedLeaderElection() bool { return false }

// Start watches the operator's pods and applies the rule on every pod event
// and every Resync until ctx ends. Failed patches are logged and retried on
// the next round. When ctx ends it steps out (stepOut) before it returns;
// Hold's runnables stop after that. Call it once.
func (l *Labeller) Start(ctx context.Context) error {
	defer close(l.stepped)
	logger := log.FromContext(ctx).WithValues("pod", l.opts.PodName)
	ctx = log.IntoContext(ctx, logger)
	factory := informers.NewSharedInformerFactoryWithOptions(l.kube, 0,
		informers.WithNamespace(l.opts.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = l.selector.String() }))
	pods := factory.Core().V1().Pods()
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return fmt.Errorf("watching the operator's pods: %w", err)
	}
	// The watch outlives ctx: stepping out waits for the successor's label.
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	factory.Start(watchCtx.Done())
	defer factory.Shutdown()
	defer stopWatch()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("syncing the cache of %v", typ)
		}
	}
	if ctx.Err() != nil {
		// Stopped before it knew the pods: it labelled nothing.
		return nil
	}
	lister := pods.Lister().Pods(l.opts.Namespace)
	tick := l.clock.NewTicker(l.opts.Resync)
	defer tick.Stop()
	logger.Info("labelling the pod that serves leases", "label", LabelKey, "selector", l.selector.String())
	for {
		l.sync(ctx, lister)
		select {
		case <-ctx.Done():
			l.stepOut(watchCtx, lister, kick, tick.C())
			return nil
		case <-kick:
		case <-tick.C():
		}
	}
}

// sync applies Decide once.
func (l *Labeller) sync(ctx context.Context, lister corev1listers.PodNamespaceLister) {
	logger := log.FromContext(ctx)
	self, peers, err := l.pods(lister)
	if err != nil {
		logger.Error(err, "listing the operator's pods")
		return
	}
	if self == nil {
		logger.V(1).Info("own pod not seen yet (or it does not match the selector)")
		return
	}
	for _, c := range Decide(self, peers, l.serving()) {
		if err := l.apply(ctx, c); err != nil {
			logger.Error(err, "updating the serving label", "target", c.Pod)
			continue
		}
		logger.Info("serving label updated", "target", c.Pod, "serving", c.Label, "leader", c.Leader)
	}
}

// pods splits the operator's pods into this replica's (nil when not seen)
// and its peers.
func (l *Labeller) pods(lister corev1listers.PodNamespaceLister) (self *corev1.Pod, peers []*corev1.Pod, err error) {
	all, err := lister.List(l.selector)
	if err != nil {
		return nil, nil, err
	}
	peers = make([]*corev1.Pod, 0, len(all))
	for _, p := range all {
		if p.Name == l.opts.PodName {
			self = p
			continue
		}
		peers = append(peers, p)
	}
	return self, peers, nil
}

// apply patches one pod's label and annotation (a pod gone is no error).
func (l *Labeller) apply(ctx context.Context, c Change) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s},"annotations":{%q:%s}}}`,
		LabelKey, value(c.Label), LeaderAnnotation, value(c.Leader))
	_, err := l.kube.CoreV1().Pods(l.opts.Namespace).Patch(ctx, c.Pod, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patching pod %s/%s: %w", l.opts.Namespace, c.Pod, err)
	}
	return nil
}

// value is the merge patch's value: set, or null to remove.
func value(set bool) string {
	if set {
		return `"` + LabelValue + `"`
	}
	return "null"
}
