package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	k8sprovider "github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

// DefaultNodeName is the Node the agent registers unless told otherwise.
const DefaultNodeName = "proxy-operator-local"

// UserDataFile is the name, inside an instance's directory, of the file that
// receives the pod's cloud-init user data.
const UserDataFile = "user-data"

// Reasons the agent writes into pod and container statuses.
const (
	ReasonSquidExited        = "Error"
	ReasonStartError         = "StartError"
	ReasonNotListening       = "NotListening"
	ReasonOutOfAddresses     = "OutOfAddresses"
	ReasonNodeAgentRestarted = "NodeAgentRestarted"
)

// Options configure an Agent. The zero value works apart from the REST config.
type Options struct {
	// NodeName is the Node to register and whose pods to run. Default
	// DefaultNodeName.
	NodeName string
	// Tag selects the pods: only pods labelled provider.TagLabel=Tag are
	// seen at all. Default: any tag (AnyTag).
	Tag string
	// AnyTag selects pods with any value of provider.TagLabel instead (e.g.
	// the contract suite, which uses a fresh tag per case).
	AnyTag bool
	// SquidPath is the squid binary. Default: squid on $PATH, else
	// /usr/sbin/squid.
	SquidPath string
	// AuthHelper is the proxy-auth-helper binary, for pods that check
	// proxy credentials (LookAuthHelper: default on $PATH, else the
	// module's bin/, built if missing).
	AuthHelper string
	// BaseDir holds one directory per instance. It and its parents must be
	// traversable by squid's user (proxy); the agent makes BaseDir 0755.
	// Default: a new temporary directory, removed when Run returns.
	BaseDir string
	// Log receives the agent's logs. Default: the logger of Run's context
	// (log.FromContext), else discarded.
	Log logr.Logger
	// Bind makes the agent bind unscheduled tagged pods to NodeName through
	// the pods/binding subresource, as a scheduler would. Without it the
	// agent runs only pods whose spec.nodeName is already NodeName.
	Bind bool
	// PoolFirst..PoolLast is the range of loopback addresses for squids.
	// Default DefaultPoolFirst..DefaultPoolLast. Agents that run at the same
	// time on one machine should get disjoint ranges; an address another
	// process listens on is skipped either way.
	PoolFirst, PoolLast netip.Addr
	// Clock drives heartbeats and timestamps. Default the real clock.
	Clock clock.WithTicker
	// LeaseInterval is how often the node Lease is renewed. Default 10s.
	LeaseInterval time.Duration
	// NodeStatusInterval is how often the Node's Ready condition is
	// refreshed. Default 1m.
	NodeStatusInterval time.Duration
	// StopGrace is how long squid gets after SIGTERM before SIGKILL.
	// Default 5s.
	StopGrace time.Duration
	// ReadyTimeout bounds the wait for a new squid to listen. Default 30s.
	ReadyTimeout time.Duration
	// Workers is the number of pods handled in parallel; stopping a squid
	// takes about two seconds, so there are many. Default 16.
	Workers int
	// Pods, when set, also runs the pods it selects as local processes
	// (the operator's own pods): see PodOptions.
	Pods *PodOptions
}

func (o *Options) setDefaults() {
	if o.NodeName == "" {
		o.NodeName = DefaultNodeName
	}
	if o.Tag == "" {
		// The operator derives its tag per installation: a kubelet runs
		// every pod of its node.
		o.AnyTag = true
	}
	if !o.PoolFirst.IsValid() {
		o.PoolFirst = DefaultPoolFirst
	}
	if !o.PoolLast.IsValid() {
		o.PoolLast = DefaultPoolLast
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.LeaseInterval <= 0 {
		o.LeaseInterval = 10 * time.Second
	}
	if o.NodeStatusInterval <= 0 {
		o.NodeStatusInterval = time.Minute
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 5 * time.Second
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 16
	}
}

// Agent plays the kubelet for tagged pods on one Node. Create it with New and
// run it with Run; an Agent runs once.
type Agent struct {
	opts      Options
	client    kubernetes.Interface
	pool      *AddrPool
	squidPath string
	// authHelper is the helper copied into baseDir ("" with
	// authHelperErr saying why there is none).
	authHelper    string
	authHelperErr error
	baseDir       string
	ownsBaseDir   bool
	log           logr.Logger

	queue  workqueue.TypedRateLimitingInterface[string]
	lister corelisters.PodLister

	ready chan struct{} // closed once the node is registered and pods listed

	pods *podRunner // nil without Options.Pods

	mu        sync.Mutex
	instances map[string]*instance // by namespace/name
}

// instance is the agent's record of one pod it runs (or tried to run).
type instance struct {
	key       string
	uid       types.UID
	addr      netip.Addr // invalid when none was allocated
	port      int
	dir       string
	squid     *Squid // nil when squid never started
	startedAt time.Time

	// Guarded by Agent.mu.
	listening  bool
	failReason string // non-empty once the instance has failed for good
	failMsg    string
	exitCode   int32
	finishedAt time.Time
}

// InstanceInfo describes one pod the agent runs, for tests and diagnostics.
type InstanceInfo struct {
	Namespace, Name string
	UID             types.UID
	// Addr is the squid's loopback address (invalid if none was allocated).
	Addr netip.Addr
	Port int
	// PID is squid's process id, 0 if it never started.
	PID int
	// Dir is the instance directory (config, logs, user data).
	Dir string
	// Listening: squid accepted a connection.
	Listening bool
	// FailReason is non-empty once the instance failed.
	FailReason string
}

// New returns an agent that talks to the API server at cfg. It checks that
// squid exists and prepares BaseDir; nothing touches the cluster before Run.
func New(cfg *rest.Config, opts Options) (*Agent, error) {
	opts.setDefaults()
	squidPath, err := LookSquid(opts.SquidPath)
	if err != nil {
		return nil, err
	}
	pool, err := NewAddrPool(opts.PoolFirst, opts.PoolLast)
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	// A fleet's worth of status writes must not queue behind client-go's
	// default 5 QPS.
	if cfg.QPS == 0 {
		cfg.QPS = 100
	}
	if cfg.Burst == 0 {
		cfg.Burst = 200
	}
	cfg.UserAgent = "proxy-operator-nodeagent/" + opts.NodeName
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating clientset: %w", err)
	}
	a := &Agent{
		opts:      opts,
		client:    cs,
		pool:      pool,
		squidPath: squidPath,
		instances: map[string]*instance{},
		ready:     make(chan struct{}),
	}
	if opts.BaseDir == "" {
		removeStaleBaseDirs()
		dir, err := os.MkdirTemp("", baseDirPrefix)
		if err != nil {
			return nil, fmt.Errorf("creating base dir: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return nil, fmt.Errorf("writing owner file: %w", err)
		}
		a.baseDir, a.ownsBaseDir = dir, true
	} else {
		dir, err := filepath.Abs(opts.BaseDir)
		if err != nil {
			return nil, fmt.Errorf("resolving base dir: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating base dir: %w", err)
		}
		a.baseDir = dir
	}
	// squid runs as proxy and must reach its instance directory.
	if err := os.Chmod(a.baseDir, 0o755); err != nil {
		return nil, fmt.Errorf("opening base dir to squid's user: %w", err)
	}
	if opts.Pods != nil {
		if a.pods, err = newPodRunner(*opts.Pods, opts.NodeName, a.baseDir, cs); err != nil {
			return nil, err
		}
	}
	// Pods that check credentials need the helper; the others run without.
	if src, err := LookAuthHelper(opts.AuthHelper); err != nil {
		a.authHelperErr = err
	} else if a.authHelper, err = InstallAuthHelper(src, a.baseDir); err != nil {
		a.authHelperErr = err
	}
	return a, nil
}

const (
	// baseDirPrefix names the temporary base directories the agent creates.
	baseDirPrefix = "proxy-operator-nodeagent-"
	// ownerFile in such a directory holds the pid of the agent's process.
	ownerFile = "owner.pid"
)

// removeStaleBaseDirs deletes temporary base directories whose agent process
// is gone: a killed agent cannot clean up, though the kernel has killed its
// squids (parent-death signal).
func removeStaleBaseDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), baseDirPrefix+"*"))
	for _, dir := range matches {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being created right now, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// processAlive reports whether pid exists (kill -0) and is not a zombie
// waiting for a parent that may never reap it.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true // no procfs: kill -0 is all we know
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// ProcessAlive reports whether the process pid exists and is not a zombie.
// Tests use it to prove that squids are gone.
func ProcessAlive(pid int) bool { return processAlive(pid) }

// BaseDir returns the directory holding the instance directories.
func (a *Agent) BaseDir() string { return a.baseDir }

// Ready is closed once Run has registered the Node and listed the pods; from
// then on the agent acts on every pod change.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// NodeName returns the Node the agent registers.
func (a *Agent) NodeName() string { return a.opts.NodeName }

// Run registers the Node, then runs squid for the agent's pods until ctx ends.
// Before returning it stops every squid it started and removes their
// directories. It returns nil when ctx ends, or the error that kept it from
// starting.
func (a *Agent) Run(ctx context.Context) error {
	if a.queue != nil {
		return errors.New("nodeagent: Run called twice")
	}
	logger := a.opts.Log
	if logger.GetSink() == nil {
		logger = logr.FromContextOrDiscard(ctx)
	}
	a.log = logger.WithValues("node", a.opts.NodeName)
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeagent"})
	defer a.cleanup()

	if err := a.registerNode(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := a.renewLease(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = provider.TagLabel + "=" + a.opts.Tag
			if a.opts.AnyTag {
				o.LabelSelector = provider.TagLabel
			}
		}))
	podInformer := factory.Core().V1().Pods()
	a.lister = podInformer.Lister()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueue,
		UpdateFunc: func(_, obj any) { a.enqueue(obj) },
		DeleteFunc: a.enqueue,
	}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	factory.Start(informerCtx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(informerCtx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("syncing %v informer", typ)
		}
	}
	a.log.Info("node agent running", "baseDir", a.baseDir, "squid", a.squidPath, "bind", a.opts.Bind)
	close(a.ready)

	var wg sync.WaitGroup
	for range a.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a.processNext(ctx) {
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.heartbeat(ctx)
	}()
	if a.pods != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.pods.run(ctx, a.log)
		}()
	}

	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	return nil
}

// cleanup stops every squid, in parallel, and removes the agent's files.
func (a *Agent) cleanup() {
	a.mu.Lock()
	insts := make([]*instance, 0, len(a.instances))
	for _, inst := range a.instances {
		insts = append(insts, inst)
	}
	a.instances = map[string]*instance{}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, inst := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.release(inst)
		}()
	}
	wg.Wait()
	if a.ownsBaseDir {
		if err := os.RemoveAll(a.baseDir); err != nil {
			a.log.Error(err, "removing base dir")
		}
	}
}

func (a *Agent) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	a.queue.Add(key)
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(key)
	if err := a.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			a.log.Error(err, "syncing pod", "pod", key)
		}
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// sync brings the squid of one pod in line with the pod, and the pod's status
// in line with the squid.
func (a *Agent) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // malformed keys never heal
	}
	pod, err := a.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		a.stop(key, nil)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod from cache: %w", err)
	}
	inst := a.get(key)
	if inst != nil && inst.uid != pod.UID {
		// Replaced under the same name: the old pod is gone.
		a.stop(key, inst)
		inst = nil
	}
	switch {
	case pod.Spec.NodeName == "":
		if a.opts.Bind && pod.DeletionTimestamp == nil {
			return a.bind(ctx, pod)
		}
		return nil
	case pod.Spec.NodeName != a.opts.NodeName:
		if inst != nil {
			a.stop(key, inst)
		}
		return nil
	case pod.DeletionTimestamp != nil:
		if inst != nil {
			a.stop(key, inst)
		}
		return a.confirmDeletion(ctx, pod)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		// Terminal: restartPolicy Never, nothing runs again.
		if inst != nil {
			a.stop(key, inst)
		}
		return nil
	case inst == nil && pod.Status.Phase == corev1.PodRunning:
		// Ran under an earlier agent whose squids died with it.
		inst = &instance{key: key, uid: pod.UID, failReason: ReasonNodeAgentRestarted,
			failMsg: "the node agent restarted; its squid processes are gone", exitCode: 137,
			finishedAt: a.opts.Clock.Now()}
		a.put(inst)
		return a.writeStatus(ctx, pod, inst)
	case inst == nil:
		inst = a.start(ctx, pod)
		return a.writeStatus(ctx, pod, inst)
	default:
		return a.writeStatus(ctx, pod, inst)
	}
}

func (a *Agent) get(key string) *instance {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.instances[key]
}

func (a *Agent) put(inst *instance) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.instances[inst.key] = inst
}

// start allocates an address and a directory and starts squid for pod. A
// failure is recorded on the returned instance (and becomes phase Failed).
func (a *Agent) start(ctx context.Context, pod *corev1.Pod) *instance {
	key := pod.Namespace + "/" + pod.Name
	log := a.log.WithValues("pod", key, "podUID", pod.UID)
	inst := &instance{key: key, uid: pod.UID, port: proxyPort(pod), startedAt: a.opts.Clock.Now()}
	a.put(inst)
	fail := func(reason string, err error) *instance {
		log.Error(err, "starting squid failed", "reason", reason)
		a.mu.Lock()
		inst.failReason, inst.failMsg, inst.exitCode, inst.finishedAt = reason, err.Error(), 128, a.opts.Clock.Now()
		a.mu.Unlock()
		a.releaseFiles(inst)
		return inst
	}

	addr, err := a.pool.Allocate(func(c netip.Addr) bool {
		return !PortFree(net.JoinHostPort(c.String(), strconv.Itoa(inst.port)))
	})
	if err != nil {
		return fail(ReasonOutOfAddresses, err)
	}
	inst.addr = addr
	inst.dir = filepath.Join(a.baseDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, shortUID(pod.UID)))
	if err := os.MkdirAll(inst.dir, 0o777); err != nil {
		return fail(ReasonStartError, fmt.Errorf("creating instance dir: %w", err))
	}
	// squid runs as proxy; the umask must not keep it out.
	if err := os.Chmod(inst.dir, 0o777); err != nil {
		return fail(ReasonStartError, fmt.Errorf("opening instance dir: %w", err))
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if c := proxyContainer(pod); c != nil {
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				env = append(env, e.Name+"="+e.Value)
			}
			if e.Name == k8sprovider.UserDataEnv {
				if err := os.WriteFile(filepath.Join(inst.dir, UserDataFile), []byte(e.Value), 0o644); err != nil {
					return fail(ReasonStartError, fmt.Errorf("writing user data: %w", err))
				}
			}
		}
	}
	if err := a.writeSecretUserData(ctx, pod, inst.dir); err != nil {
		return fail(ReasonStartError, err)
	}
	cfg := SquidConfig{Addr: addr, Port: inst.port, Dir: inst.dir, VisibleHostname: pod.Name}
	if cfg.AuthConfig, cfg.AccessRules, err = a.authConfig(ctx, pod); err != nil {
		return fail(ReasonStartError, err)
	}
	if len(cfg.AuthConfig) > 0 {
		if a.authHelper == "" {
			return fail(ReasonStartError, fmt.Errorf("the pod checks proxy credentials, and the node agent has no auth helper: %w", a.authHelperErr))
		}
		cfg.AuthHelper = a.authHelper
	}
	sq, err := StartSquid(a.squidPath, cfg, env)
	if err != nil {
		return fail(ReasonStartError, err)
	}
	inst.squid = sq
	log.Info("squid started", "addr", cfg.ListenAddr(), "pid", sq.PID())
	go a.watch(ctx, inst)
	return inst
}

// watch waits for the instance's squid to listen, then for it to exit, and
// records each for sync.
func (a *Agent) watch(ctx context.Context, inst *instance) {
	sq := inst.squid
	addr := sq.Config().ListenAddr()
	readyCtx, cancel := context.WithTimeout(ctx, a.opts.ReadyTimeout)
	err := WaitListening(readyCtx, addr, sq.Done())
	cancel()
	switch {
	case err == nil:
		a.mu.Lock()
		inst.listening = true
		a.mu.Unlock()
		a.queue.Add(inst.key)
	case ctx.Err() != nil:
		return
	case !sq.Exited():
		a.mu.Lock()
		inst.failReason, inst.failMsg = ReasonNotListening, err.Error()
		a.mu.Unlock()
		_ = sq.Stop(a.opts.StopGrace)
	}
	<-sq.Done()
	if sq.Stopping() && inst.failReason == "" {
		return // asked to stop: the pod is going away
	}
	a.mu.Lock()
	if inst.failReason == "" {
		inst.failReason = ReasonSquidExited
		inst.failMsg = fmt.Sprintf("squid exited (%v)", sq.ExitError())
		if tail := logtail.File(sq.Config().CacheLogPath(), 5); tail != "" {
			inst.failMsg += ": " + tail
		}
	}
	inst.exitCode = int32(sq.ExitCode())
	inst.finishedAt = a.opts.Clock.Now()
	a.mu.Unlock()
	a.log.Info("squid exited", "pod", inst.key, "reason", inst.failReason, "exitCode", inst.exitCode)
	a.queue.Add(inst.key)
}

// stop forgets the pod's instance (inst, or whatever is recorded for key),
// stopping its squid and freeing its address and directory.
func (a *Agent) stop(key string, inst *instance) {
	a.mu.Lock()
	if inst == nil {
		inst = a.instances[key]
	}
	if inst != nil && a.instances[key] == inst {
		delete(a.instances, key)
	}
	a.mu.Unlock()
	if inst != nil {
		a.release(inst)
	}
}

func (a *Agent) release(inst *instance) {
	if inst.squid != nil {
		if err := inst.squid.Stop(a.opts.StopGrace); err != nil {
			a.log.Error(err, "stopping squid", "pod", inst.key)
		} else {
			a.log.Info("squid stopped", "pod", inst.key, "pid", inst.squid.PID())
		}
	}
	a.releaseFiles(inst)
}

func (a *Agent) releaseFiles(inst *instance) {
	if inst.addr.IsValid() {
		a.pool.Release(inst.addr)
	}
	if inst.dir != "" {
		if err := os.RemoveAll(inst.dir); err != nil {
			a.log.Error(err, "removing instance dir", "pod", inst.key)
		}
	}
}

// Instance returns what the agent runs for the pod namespace/name.
func (a *Agent) Instance(namespace, name string) (InstanceInfo, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	inst, ok := a.instances[namespace+"/"+name]
	if !ok {
		return InstanceInfo{}, false
	}
	return inst.infoLocked(), true
}

// Instances returns every instance the agent holds, sorted by namespace/name.
func (a *Agent) Instances() []InstanceInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]InstanceInfo, 0, len(a.instances))
	for _, inst := range a.instances {
		out = append(out, inst.infoLocked())
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}

func (inst *instance) infoLocked() InstanceInfo {
	ns, name, _ := strings.Cut(inst.key, "/")
	info := InstanceInfo{Namespace: ns, Name: name, UID: inst.uid, Addr: inst.addr, Port: inst.port,
		Dir: inst.dir, Listening: inst.listening, FailReason: inst.failReason}
	if inst.squid != nil {
		info.PID = inst.squid.PID()
	}
	return info
}

// proxyContainer is the container the provider's pods run squid in: the one
// with a port named "proxy", else the first.
func proxyContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		for _, p := range pod.Spec.Containers[i].Ports {
			if p.Name == k8sprovider.PortName {
				return &pod.Spec.Containers[i]
			}
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return &pod.Spec.Containers[0]
	}
	return nil
}

// proxyPort is the port of the proxy container's port named "proxy", else
// its first port, else DefaultSquidPort.
func proxyPort(pod *corev1.Pod) int {
	c := proxyContainer(pod)
	if c == nil || len(c.Ports) == 0 {
		return DefaultSquidPort
	}
	for _, p := range c.Ports {
		if p.Name == k8sprovider.PortName && p.ContainerPort > 0 {
			return int(p.ContainerPort)
		}
	}
	if p := c.Ports[0].ContainerPort; p > 0 {
		return int(p)
	}
	return DefaultSquidPort
}

func shortUID(uid types.UID) string {
	s := string(uid)
	if len(s) > 8 {
		s = s[:8]
	}
	return s
}

// writeSecretUserData does what a kubelet does for the kubernetes provider's
// user data Secret volume (mounted at k8sprovider.UserDataDir): it reads the
// Secret and writes the item's key to <dir>/UserDataFile.
func (a *Agent) writeSecretUserData(ctx context.Context, pod *corev1.Pod, dir string) error {
	c := proxyContainer(pod)
	if c == nil {
		return nil
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != k8sprovider.UserDataDir {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil || len(v.Secret.Items) != 1 {
				continue
			}
			s, err := a.client.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading the user data Secret %s: %w", v.Secret.SecretName, err)
			}
			data, ok := s.Data[v.Secret.Items[0].Key]
			if !ok {
				return fmt.Errorf("the user data Secret %s has no key %q", v.Secret.SecretName, v.Secret.Items[0].Key)
			}
			if err := os.WriteFile(filepath.Join(dir, UserDataFile), data, 0o644); err != nil {
				return fmt.Errorf("writing user data: %w", err)
			}
		}
	}
	return nil
}
