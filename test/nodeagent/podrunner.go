package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// PodOptions make an Agent also run, as local processes, the pods Selector
// selects (the operator's own pods, from its install manifests), with what a
// kubelet gives a pod: a pod IP of its own (PodNetwork, listening at its
// PodLoopback), the projected service-account token, CA and namespace at
// /var/run/secrets/kubernetes.io/serviceaccount (a mount namespace of its
// own), KUBERNETES_SERVICE_HOST/PORT, the container's env (values and the
// downward API's fieldRefs), an /etc/hosts naming the cluster's Services,
// readiness and liveness probes (httpGet) run as the pod says, a read-only
// root when the container's securityContext says readOnlyRootFilesystem,
// its emptyDir volumes (at directories that exist on the host), a restart
// after an exit (restartPolicy Always), and on deletion SIGTERM, the grace
// period, SIGKILL. A force-deleted pod's process is killed at once.
//
// What differs from a kubelet: every container runs Binary, whatever its
// image (a pod has one container; init containers are not run); the
// process runs as the agent's user; pods share the host's network, so a
// bind-address flag that means "every interface" is narrowed to the pod's
// address (BindArgs). Needs root (mount namespaces).
type PodOptions struct {
	// Selector picks the pods, in every namespace. Required.
	Selector labels.Selector
	// Binary runs in place of each pod's container image. Required.
	Binary string
	// Subnet is the node's pod subnet: pod IPs 10.244.<Subnet>.2-254. One
	// per agent, from 1.
	Subnet uint8
	// APIServer is the API server's URL, given to pods as
	// KUBERNETES_SERVICE_HOST/PORT (a kubelet gives the kubernetes Service's
	// ClusterIP; here nothing proxies the API server). Required.
	APIServer string
	// CAFile is the cluster CA, the ca.crt of the service-account volume.
	// Required.
	CAFile string
	// Services, when set, names the cluster's Services in each pod's
	// /etc/hosts (in the place of cluster DNS).
	Services *ServiceProxy
	// AddArgs are flags appended with the pod's address (--flag=<address>)
	// when the container's args lack them: bind addresses whose default is
	// every interface.
	AddArgs []string
	// Bind schedules pending selected pods, as kube-scheduler would with
	// topology spread over hostnames (PickNode).
	Bind bool
	// Interval between syncs with the API server. Default 250ms.
	Interval time.Duration
	// BackOff is the wait before a container that exited is started again.
	// Default 10s, the kubelet's first back-off.
	BackOff time.Duration
}

func (o *PodOptions) validate() error {
	var errs []error
	if o.Selector == nil || o.Selector.Empty() {
		errs = append(errs, errors.New("pods: a Selector is required"))
	}
	if _, err := os.Stat(o.Binary); err != nil {
		errs = append(errs, fmt.Errorf("pods: binary: %w", err))
	}
	if o.Subnet == 0 {
		errs = append(errs, errors.New("pods: Subnet must be 1-255, one per agent"))
	}
	if u, err := url.Parse(o.APIServer); err != nil || u.Hostname() == "" || u.Port() == "" {
		errs = append(errs, fmt.Errorf("pods: APIServer %q must be https://host:port", o.APIServer))
	}
	if _, err := os.Stat(o.CAFile); err != nil {
		errs = append(errs, fmt.Errorf("pods: CA file: %w", err))
	}
	if o.Interval <= 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.BackOff <= 0 {
		o.BackOff = 10 * time.Second
	}
	return errors.Join(errs...)
}

// podRunner is the part of an Agent that runs process pods.
type podRunner struct {
	opts   PodOptions
	node   string
	client kubernetes.Interface
	log    logr.Logger
	dir    string
	pool   *AddrPool

	mu    sync.Mutex
	procs map[types.UID]*podProc
	logs  map[string]string // pod namespace/name → log of its latest process
}

func newPodRunner(opts PodOptions, node, baseDir string, client kubernetes.Interface) (*podRunner, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	pool, err := podSubnetPool(opts.Subnet)
	if err != nil {
		return nil, err
	}
	return &podRunner{opts: opts, node: node, client: client, dir: filepath.Join(baseDir, "pods"), pool: pool,
		procs: map[types.UID]*podProc{}, logs: map[string]string{}}, nil
}

// run syncs every Interval until ctx ends, then kills every process.
func (r *podRunner) run(ctx context.Context, log logr.Logger) {
	r.log = log.WithName("pods")
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		if err := r.sync(ctx); err != nil && ctx.Err() == nil {
			r.log.Error(err, "syncing pods")
		}
		select {
		case <-ctx.Done():
			r.mu.Lock()
			procs := slices.Collect(maps.Values(r.procs))
			r.mu.Unlock()
			for _, p := range procs {
				p.kill()
			}
			for _, p := range procs {
				p.waitStopped()
			}
			return
		case <-t.C:
		}
	}
}

// sync is one pass: schedule, start, report, terminate.
func (r *podRunner) sync(ctx context.Context) error {
	list, err := r.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: r.opts.Selector.String()})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	if r.opts.Bind {
		if err := r.schedule(ctx, list.Items); err != nil {
			return err
		}
	}
	seen := map[types.UID]bool{}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName != r.node {
			continue
		}
		seen[pod.UID] = true
		r.mu.Lock()
		p := r.procs[pod.UID]
		r.mu.Unlock()
		switch {
		case p == nil && pod.DeletionTimestamp != nil:
			r.confirmDeletion(ctx, pod)
		case p == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed):
		case p == nil:
			p, err := r.start(ctx, pod)
			if err != nil {
				r.log.Error(err, "starting pod", "pod", pod.Namespace+"/"+pod.Name)
				r.writeFailed(ctx, pod, err)
				continue
			}
			r.mu.Lock()
			r.procs[pod.UID] = p
			r.logs[pod.Namespace+"/"+pod.Name] = p.logPath
			r.mu.Unlock()
		case pod.DeletionTimestamp != nil:
			if p.terminate(time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 30)) * time.Second) {
				r.log.Info("pod terminating", "pod", pod.Namespace+"/"+pod.Name, "grace", ptr.Deref(pod.DeletionGracePeriodSeconds, 30))
			}
			if p.stopped() {
				r.forget(p)
				r.confirmDeletion(ctx, pod)
			}
		default:
			p.refresh(ctx, r)
			r.writeStatus(ctx, pod, p)
		}
	}
	// A pod gone without a graceful deletion (--force --grace-period=0):
	// its process is killed at once.
	r.mu.Lock()
	var gone []*podProc
	for uid, p := range r.procs {
		if !seen[uid] {
			gone = append(gone, p)
		}
	}
	r.mu.Unlock()
	for _, p := range gone {
		r.log.Info("pod force-deleted, killing its process", "pod", p.namespace+"/"+p.name)
		p.kill()
		r.forget(p)
	}
	return nil
}

// forget drops p once its process has stopped, and frees its address.
func (r *podRunner) forget(p *podProc) {
	go func() {
		p.waitStopped()
		r.pool.Release(p.loopback)
	}()
	r.mu.Lock()
	delete(r.procs, p.uid)
	r.mu.Unlock()
}

// confirmDeletion is the kubelet's last word on a deleted pod: a delete with
// grace period 0, guarded by its UID.
func (r *podRunner) confirmDeletion(ctx context.Context, pod *corev1.Pod) {
	err := r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		r.log.Error(err, "confirming pod deletion", "pod", pod.Namespace+"/"+pod.Name)
	}
}

// schedule binds the pending pods PickNode gives this node.
func (r *podRunner) schedule(ctx context.Context, pods []corev1.Pod) error {
	var pending []*corev1.Pod
	for i := range pods {
		if pods[i].Spec.NodeName == "" && pods[i].DeletionTimestamp == nil {
			pending = append(pending, &pods[i])
		}
	}
	if len(pending) == 0 {
		return nil
	}
	nodes, err := r.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, pod := range pending {
		if PickNode(pod, nodes.Items, pods) != r.node {
			continue
		}
		binding := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: r.node},
		}
		err := r.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
		switch {
		case err == nil:
			r.log.Info("pod scheduled", "pod", pod.Namespace+"/"+pod.Name)
			pod.Spec.NodeName = r.node // counts for the next pending pod
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			return fmt.Errorf("binding pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// PickNode is where kube-scheduler would put pod among nodes, for pods that
// spread over hostnames: a Ready, schedulable (not cordoned) node whose
// NoSchedule taints the pod tolerates, with the
// fewest pods of the pod's namespace that its topology spread selector (else
// its own labels) selects, not counting pods being deleted; the smallest
// name among equals. "" when no node qualifies.
func PickNode(pod *corev1.Pod, nodes []corev1.Node, pods []corev1.Pod) string {
	sel := labels.SelectorFromSet(pod.Labels)
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.LabelSelector != nil {
			if s, err := metav1.LabelSelectorAsSelector(c.LabelSelector); err == nil {
				sel = s
			}
		}
	}
	count := map[string]int{}
	for _, p := range pods {
		if p.Namespace == pod.Namespace && p.Spec.NodeName != "" && p.DeletionTimestamp == nil &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && sel.Matches(labels.Set(p.Labels)) {
			count[p.Spec.NodeName]++
		}
	}
	best, bestCount := "", 0
	for _, n := range nodes {
		if n.Spec.Unschedulable || !nodeReady(&n) || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule && !slices.ContainsFunc(pod.Spec.Tolerations, func(tol corev1.Toleration) bool {
				return tol.ToleratesTaint(logr.Discard(), &t, false)
			})
		}) {
			continue
		}
		c := count[n.Name]
		if best == "" || c < bestCount || c == bestCount && n.Name < best {
			best, bestCount = n.Name, c
		}
	}
	return best
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodLogs maps each pod the agent ran (namespace/name) to the log of its
// latest process: for tests to show when they fail.
func (a *Agent) PodLogs() map[string]string {
	if a.pods == nil {
		return nil
	}
	a.pods.mu.Lock()
	defer a.pods.mu.Unlock()
	return maps.Clone(a.pods.logs)
}

// BindArgs narrows each --*bind-address flag of args that means every
// interface (":port", "0.0.0.0:port", "[::]:port", "0.0.0.0", "::") to
// addr, and appends --flag=addr for each of add that args lack: in a pod
// "every interface" is the pod's own; here it would be the host's.
func BindArgs(args []string, addr netip.Addr, add []string) []string {
	out := make([]string, 0, len(args)+len(add))
	for _, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if ok && strings.HasPrefix(name, "--") && strings.HasSuffix(name, "bind-address") {
			switch {
			case val == "0.0.0.0" || val == "::":
				a = name + "=" + addr.String()
			case strings.HasPrefix(val, ":"):
				a = name + "=" + addr.String() + val
			case strings.HasPrefix(val, "0.0.0.0:"):
				a = name + "=" + addr.String() + strings.TrimPrefix(val, "0.0.0.0")
			case strings.HasPrefix(val, "[::]:"):
				a = name + "=" + addr.String() + strings.TrimPrefix(val, "[::]")
			}
		}
		out = append(out, a)
	}
	for _, f := range add {
		if !slices.ContainsFunc(args, func(a string) bool { return a == f || strings.HasPrefix(a, f+"=") }) {
			out = append(out, f+"="+addr.String())
		}
	}
	return out
}
