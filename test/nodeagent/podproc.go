package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// ServiceAccountDir is where a pod finds its service-account token, CA and
// namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// tokenSeconds is the lifetime of a pod's token (the kubelet's request), and
// tokenRefresh when the agent asks for a new one (at 80%, as the kubelet).
const (
	tokenSeconds = 3607
	tokenRefresh = tokenSeconds * 8 / 10 * time.Second
)

// sandboxScript runs in the pod's own mount and UTS namespaces: the pod's
// name ($3) as hostname, the service-account directory ($1) at
// ServiceAccountDir (on a tmpfs over /run, so the host is left alone), the
// pod's hosts file ($2) at /etc/hosts; the container's binary ($5) bound
// into that tmpfs (a volume may cover where it lies); $6 pairs of a volume's
// directory and its mount path, bound over it; the root read-only when $4 is
// "ro" (readOnlyRootFilesystem: in this namespace only; last, as a bind
// mount made after it would be read-only too); then the binary with the
// arguments that follow.
const sandboxScript = `set -e
echo "$3" > /proc/sys/kernel/hostname
run=$(readlink -f /var/run)
mount -t tmpfs -o mode=0755 pod-run "$run"
mkdir -p "$run/secrets/kubernetes.io/serviceaccount"
mount --bind "$1" "$run/secrets/kubernetes.io/serviceaccount"
mount --bind "$2" /etc/hosts
: > "$run/container"
mount --bind "$5" "$run/container"
root=$4
n=$6
shift 6
while [ "$n" -gt 0 ]; do
  mount --bind "$1" "$2"
  shift 2
  n=$((n-1))
done
if [ "$root" = ro ]; then mount -o remount,bind,ro /; fi
exec "$run/container" "$@"`

// podProc is one pod run as a process, across its container's restarts.
type podProc struct {
	uid             types.UID
	namespace, name string
	serviceAccount  string
	loopback, podIP netip.Addr
	dir, logPath    string
	container       corev1.Container
	grace, backOff  time.Duration
	argv, env       []string
	log             logr.Logger

	mu          sync.Mutex
	proc        *os.Process
	startedAt   time.Time
	ready       bool
	restarts    int32
	last        *corev1.ContainerStateTerminated
	stopping    bool
	done        chan struct{} // closed once stopping and the process is gone
	tokenAt     time.Time
	hosts       []byte
	restartNext bool // liveness failed: the next exit is a restart, not a crash
}

// start prepares pod's sandbox files and starts its process.
func (r *podRunner) start(ctx context.Context, pod *corev1.Pod) (*podProc, error) {
	if len(pod.Spec.Containers) != 1 {
		return nil, fmt.Errorf("the node agent runs pods of one container; %s has %d", pod.Name, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	loop, err := r.pool.Allocate(func(a netip.Addr) bool {
		for _, p := range c.Ports {
			if !PortFree(net.JoinHostPort(a.String(), strconv.Itoa(int(p.ContainerPort)))) {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	p := &podProc{
		uid: pod.UID, namespace: pod.Namespace, name: pod.Name, serviceAccount: pod.Spec.ServiceAccountName,
		loopback: loop, podIP: podIPFor(loop),
		dir:       filepath.Join(r.dir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, shortUID(pod.UID))),
		container: c, backOff: r.opts.BackOff, done: make(chan struct{}),
		grace: time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second,
		log:   r.log.WithValues("pod", pod.Namespace+"/"+pod.Name),
	}
	fail := func(err error) (*podProc, error) {
		r.pool.Release(loop)
		return nil, err
	}
	p.logPath = filepath.Join(p.dir, c.Name+".log")
	if err := os.MkdirAll(filepath.Join(p.dir, "serviceaccount"), 0o755); err != nil {
		return fail(err)
	}
	if err := p.writeToken(ctx, r); err != nil {
		return fail(err)
	}
	ca, err := os.ReadFile(r.opts.CAFile)
	if err != nil {
		return fail(err)
	}
	for name, data := range map[string][]byte{"ca.crt": ca, "namespace": []byte(pod.Namespace)} {
		if err := os.WriteFile(filepath.Join(p.dir, "serviceaccount", name), data, 0o644); err != nil {
			return fail(err)
		}
	}
	if err := p.writeHosts(r); err != nil {
		return fail(err)
	}
	if p.env, err = containerEnv(pod, &c, p.podIP, r.opts.APIServer); err != nil {
		return fail(err)
	}
	// The binary replaces the command's first word (the image's program).
	args := append(append([]string(nil), c.Command[min(1, len(c.Command)):]...), c.Args...)
	args = expandArgs(args, p.env)
	args = BindArgs(args, loop, r.opts.AddArgs)
	mounts, err := emptyDirMounts(pod, &c, filepath.Join(p.dir, "volumes"))
	if err != nil {
		return fail(err)
	}
	root := "rw"
	if sc := c.SecurityContext; sc != nil && ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
		root = "ro"
	}
	p.argv = append([]string{"--mount", "--uts", "--propagation", "private", "--", "/bin/sh", "-c", sandboxScript, "sh",
		filepath.Join(p.dir, "serviceaccount"), filepath.Join(p.dir, "hosts"), pod.Name, root, r.opts.Binary, strconv.Itoa(len(mounts) / 2)}, mounts...)
	p.argv = append(p.argv, args...)
	go p.loop(ctx)
	p.log.Info("pod started", "podIP", p.podIP, "listensOn", loop)
	return p, nil
}

// emptyDirMounts makes a directory under dir for each emptyDir volume c
// mounts, as a kubelet does (it lasts as long as the pod, across the
// container's restarts), and returns the pairs of directory and mount path
// the sandbox binds. Only existing directories of the host can be mount
// points (the agent creates nothing outside its own directory); volumes of
// other kinds are not mounted.
func emptyDirMounts(pod *corev1.Pod, c *corev1.Container, dir string) ([]string, error) {
	var pairs []string
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Spec.Volumes[i].EmptyDir == nil {
			continue
		}
		if fi, err := os.Stat(m.MountPath); err != nil || !fi.IsDir() || !filepath.IsAbs(m.MountPath) {
			return nil, fmt.Errorf("volume %s: the node agent mounts an emptyDir only at an existing directory of the host, not at %q", m.Name, m.MountPath)
		}
		src := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(src, 0o777); err != nil {
			return nil, fmt.Errorf("volume %s: %w", m.Name, err)
		}
		pairs = append(pairs, src, m.MountPath)
	}
	return pairs, nil
}

// expandArgs replaces $(NAME) in args with NAME's value in env, as a
// kubelet does for command and args: $$ is a literal $, and a reference to
// a name env lacks stays as written.
func expandArgs(args, env []string) []string {
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		var b strings.Builder
		for j := 0; j < len(a); j++ {
			switch {
			case a[j] == '$' && j+1 < len(a) && a[j+1] == '$':
				b.WriteByte('$')
				j++
			case a[j] == '$' && j+1 < len(a) && a[j+1] == '(':
				end := strings.IndexByte(a[j:], ')')
				if end < 0 {
					b.WriteString(a[j:])
					j = len(a)
					continue
				}
				name := a[j+2 : j+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(a[j : j+end+1])
				}
				j += end
			default:
				b.WriteByte(a[j])
			}
		}
		out[i] = b.String()
	}
	return out
}

// containerEnv is what a kubelet puts in the container's environment.
func containerEnv(pod *corev1.Pod, c *corev1.Container, podIP netip.Addr, apiServer string) ([]string, error) {
	u, err := url.Parse(apiServer)
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + pod.Name,
		"KUBERNETES_SERVICE_HOST=" + u.Hostname(),
		"KUBERNETES_SERVICE_PORT=" + u.Port(),
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil:
			var v string
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "spec.serviceAccountName":
				v = pod.Spec.ServiceAccountName
			case "status.podIP":
				v = podIP.String()
			case "status.hostIP":
				v = HostIP
			default:
				return nil, fmt.Errorf("env %s: fieldRef %s is not supported by the node agent", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env = append(env, e.Name+"="+v)
		default:
			return nil, fmt.Errorf("env %s: only values and fieldRefs are supported by the node agent", e.Name)
		}
	}
	return env, nil
}

// writeToken asks for the pod's bound service-account token, as the kubelet
// does for the projected volume, and puts it in place atomically.
func (p *podProc) writeToken(ctx context.Context, r *podRunner) error {
	sa := p.serviceAccount
	if sa == "" {
		sa = "default"
	}
	tr, err := r.client.CoreV1().ServiceAccounts(p.namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](tokenSeconds),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.name, UID: p.uid},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting the token of service account %s: %w", sa, err)
	}
	tmp := filepath.Join(p.dir, "serviceaccount", ".token.tmp")
	if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(p.dir, "serviceaccount", "token")); err != nil {
		return err
	}
	p.mu.Lock()
	p.tokenAt = time.Now()
	p.mu.Unlock()
	return nil
}

// writeHosts writes the pod's /etc/hosts in place (it is bind-mounted) when
// it changed.
func (p *podProc) writeHosts(r *podRunner) error {
	hosts := []byte("127.0.0.1\tlocalhost\n")
	if r.opts.Services != nil {
		hosts = r.opts.Services.Hosts()
	}
	hosts = append(hosts, fmt.Sprintf("%s\t%s\n", p.podIP, p.name)...)
	p.mu.Lock()
	same := bytes.Equal(hosts, p.hosts)
	p.hosts = hosts
	p.mu.Unlock()
	if same {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(p.dir, "hosts"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(hosts)
	return errors.Join(err, f.Close())
}

// refresh renews the token at 80% of its life and the hosts file.
func (p *podProc) refresh(ctx context.Context, r *podRunner) {
	p.mu.Lock()
	old := time.Since(p.tokenAt) > tokenRefresh
	p.mu.Unlock()
	if old {
		if err := p.writeToken(ctx, r); err != nil {
			p.log.Error(err, "refreshing the service-account token")
		}
	}
	if err := p.writeHosts(r); err != nil {
		p.log.Error(err, "writing /etc/hosts")
	}
}

// loop runs the container until the pod stops: a process, its probes, and
// after an exit the back-off and the next process.
func (p *podProc) loop(ctx context.Context) {
	defer close(p.done)
	for {
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			return
		}
		logf, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		var cmd *exec.Cmd
		if err == nil {
			cmd = exec.Command("unshare", p.argv...)
			cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = p.env, logf, logf, "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			err = cmd.Start()
		}
		if err != nil {
			p.last = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error(), FinishedAt: metav1.Now()}
			p.mu.Unlock()
		} else {
			p.proc, p.startedAt, p.ready, p.restartNext = cmd.Process, time.Now(), false, false
			p.mu.Unlock()
			probeCtx, stopProbes := context.WithCancel(ctx)
			go p.probe(probeCtx, p.container.ReadinessProbe, false)
			go p.probe(probeCtx, p.container.LivenessProbe, true)
			err := cmd.Wait()
			stopProbes()
			code := int32(0)
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = int32(exit.ExitCode())
				if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					code = 128 + int32(ws.Signal())
				}
			}
			p.mu.Lock()
			reason := "Completed"
			if code != 0 {
				reason = "Error"
			}
			p.last = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: metav1.NewTime(p.startedAt), FinishedAt: metav1.Now()}
			p.proc, p.ready = nil, false
			p.mu.Unlock()
			p.log.Info("container exited", "exitCode", code)
		}
		if logf != nil {
			_ = logf.Close()
		}
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			return
		}
		p.restarts++
		immediate := p.restartNext
		p.mu.Unlock()
		wait := p.backOff
		if immediate {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// probe runs pr until ctx ends: readiness sets p.ready; liveness restarts
// the container after FailureThreshold failures.
func (p *podProc) probe(ctx context.Context, pr *corev1.Probe, liveness bool) {
	if pr == nil || pr.HTTPGet == nil {
		if !liveness {
			p.mu.Lock()
			p.ready = true
			p.mu.Unlock()
		}
		return
	}
	period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	failures, successes := 0, 0
	failAt, succeedAt := max(int(pr.FailureThreshold), 1), max(int(pr.SuccessThreshold), 1)
	if pr.FailureThreshold == 0 {
		failAt = 3
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(pr.InitialDelaySeconds) * time.Second):
	}
	hc := &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for {
		ok := p.httpGet(ctx, hc, pr.HTTPGet)
		if ok {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
		}
		p.mu.Lock()
		switch {
		case !liveness && ok && successes >= succeedAt:
			p.ready = true
		case !liveness && !ok && failures >= failAt:
			p.ready = false
		case liveness && failures >= failAt && p.proc != nil && !p.stopping:
			p.log.Info("liveness probe failed; restarting the container", "failures", failures)
			p.restartNext = true
			p.signalLocked(syscall.SIGTERM)
			proc := p.proc
			time.AfterFunc(p.grace, func() { _ = proc.Signal(syscall.SIGKILL) })
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// httpGet is one httpGet probe on the pod's address: 200-399 passes.
func (p *podProc) httpGet(ctx context.Context, hc *http.Client, g *corev1.HTTPGetAction) bool {
	port, err := containerPort(&p.container, g.Port)
	if err != nil {
		return false
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := scheme + "://" + net.JoinHostPort(p.loopback.String(), strconv.Itoa(port)) + g.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "kube-probe/nodeagent")
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// containerPort resolves a probe's port, by number or by name.
func containerPort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}

func (p *podProc) signalLocked(sig syscall.Signal) {
	if p.proc != nil {
		// The process group: unshare execs sh execs the binary, one pid.
		_ = syscall.Kill(-p.proc.Pid, sig)
	}
}

// terminate starts the pod's graceful stop (SIGTERM, SIGKILL after grace);
// false when it had already begun.
func (p *podProc) terminate(grace time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return false
	}
	p.stopping = true
	p.signalLocked(syscall.SIGTERM)
	time.AfterFunc(grace, p.kill)
	return true
}

// kill stops the pod at once (SIGKILL).
func (p *podProc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopping = true
	p.signalLocked(syscall.SIGKILL)
}

func (p *podProc) stopped() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *podProc) waitStopped() { <-p.done }

// status is the pod status a kubelet would report for p.
func (p *podProc) status(pod *corev1.Pod) corev1.PodStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := running(pod, p.podIP.String(), metav1.NewTime(p.startedAt))
	ready, reason := corev1.ConditionFalse, "ContainersNotReady"
	if p.ready && p.proc != nil {
		ready, reason = corev1.ConditionTrue, ""
	}
	at := metav1.Now()
	if podReady(&pod.Status) == (ready == corev1.ConditionTrue) {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady {
				at = c.LastTransitionTime
			}
		}
	}
	s.Conditions = conditions(at, ready, reason, "")
	cs := corev1.ContainerStatus{
		Name: p.container.Name, Image: p.container.Image, ImageID: "nodeagent://" + p.container.Image,
		Ready: ready == corev1.ConditionTrue, Started: ptr.To(p.proc != nil), RestartCount: p.restarts,
	}
	if p.proc != nil {
		cs.ContainerID = fmt.Sprintf("nodeagent://%d", p.proc.Pid)
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(p.startedAt)}
	} else {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off restarting the container"}
	}
	if p.last != nil {
		cs.LastTerminationState.Terminated = p.last.DeepCopy()
	}
	s.ContainerStatuses = []corev1.ContainerStatus{cs}
	return s
}

// writeStatus reports p on pod when what a reader acts on differs: phase,
// pod IP, readiness, restarts, whether the container runs.
func (r *podRunner) writeStatus(ctx context.Context, pod *corev1.Pod, p *podProc) {
	want := p.status(pod)
	cur := pod.Status
	same := cur.Phase == want.Phase && cur.PodIP == want.PodIP && podReady(&cur) == podReady(&want) &&
		len(cur.ContainerStatuses) == 1 && cur.ContainerStatuses[0].RestartCount == want.ContainerStatuses[0].RestartCount &&
		(cur.ContainerStatuses[0].State.Running != nil) == (want.ContainerStatuses[0].State.Running != nil)
	if same {
		return
	}
	updated := pod.DeepCopy()
	updated.Status = want
	if _, err := r.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil &&
		!apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		r.log.Error(err, "writing pod status", "pod", pod.Namespace+"/"+pod.Name)
		return
	}
	r.log.V(1).Info("pod status written", "pod", pod.Namespace+"/"+pod.Name, "ready", podReady(&want), "restarts", want.ContainerStatuses[0].RestartCount)
}

// writeFailed reports a pod the agent could not start.
func (r *podRunner) writeFailed(ctx context.Context, pod *corev1.Pod, cause error) {
	if pod.Status.Phase == corev1.PodFailed {
		return
	}
	updated := pod.DeepCopy()
	updated.Status = failedStatus(pod, Observation{FailReason: "StartError", FailMsg: cause.Error(), ExitCode: 128, FinishedAt: metav1.Now()})
	if _, err := r.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
		r.log.Error(err, "writing pod status", "pod", pod.Namespace+"/"+pod.Name)
	}
}
