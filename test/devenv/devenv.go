package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/gcefake"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// The contract under Options.Dir.
const (
	// KubeconfigFile is an admin kubeconfig, credentials embedded.
	KubeconfigFile = "kubeconfig"
	// DiscoveryTokenFile holds the HTTP discovery API's bearer token: the one
	// the operator generated into its token Secret (new every run).
	DiscoveryTokenFile = "discovery-token"
	// DiscoveryURLFile holds the discovery API's base URL, e.g.
	// https://127.0.0.1:8090.
	DiscoveryURLFile = "discovery-url"
	// GatewayURLFile holds the forward-proxy gateway's URL without
	// credentials, e.g. http://127.0.0.1:8888 (docs/gateway.md).
	GatewayURLFile = "gateway-url"
	// CAFile is the CA that verifies the operator's serving certificate (the
	// HTTP discovery API's and the aggregated API's): the one it issued into
	// its Secret this run and published in its CA ConfigMap.
	CAFile = "ca.crt"
	// ReadyFile exists only while everything is up and the sample fleet is
	// Ready (written last, removed first).
	ReadyFile = "ready"
	// ControlPlaneDir holds certificates, etcd data and the control plane's logs.
	ControlPlaneDir = "controlplane"
	// ServingCertSecret, DiscoveryTokenSecret, LeaseCheckpointSecret and
	// LeaseSigningSecret are the Secrets the operator writes in its
	// namespace (--serving-cert-secret, --discovery-token-secret,
	// --lease-checkpoint-secret, --lease-signing-secret), as installed.
	ServingCertSecret     = "proxy-operator-serving-cert"
	DiscoveryTokenSecret  = "proxy-operator-discovery-token"
	LeaseCheckpointSecret = "proxy-operator-leases"
	LeaseSigningSecret    = "proxy-operator-lease-key"
	// LogsDir holds the operators' logs (operator.log, or operator-<i>.log),
	// nodeagent.log, gce.log and what the caller writes there (bin/dev:
	// dev.log).
	LogsDir = "logs"
)

// Ports of the dev environment, all on 127.0.0.1. Zero picks a free port.
type Ports struct {
	Discovery int
	APIServer int
	Metrics   int
	Probes    int
	Origin    int
	Gateway   int
}

// DefaultPorts are the documented ports of `make dev`: the operator's own
// defaults (discovery 8090, aggregated API 7443, metrics 8080, probes 8081),
// 8888 for the gateway and 8088 for the origin.
func DefaultPorts() Ports {
	return Ports{Discovery: 8090, APIServer: 7443, Metrics: 8080, Probes: 8081, Origin: 8088, Gateway: 8888}
}

// Options configure Start.
type Options struct {
	// Dir receives the contract files and logs (required). Start creates it.
	Dir string
	// Ports of the servers; zero fields pick free ports.
	Ports Ports
	// Progress receives one line per step ("dev: starting …"); nil discards.
	Progress io.Writer
	// Operators is how many operator processes run (default 1); more than
	// one elect a leader, behind a service on the dev ports.
	Operators int
	// OperatorBinary is the operator binary (bin/proxy-operator); empty:
	// built into <Dir>/bin.
	OperatorBinary string
	// NodeName is the node agent's Node (default nodeagent.DefaultNodeName).
	NodeName string
	// ControllerManager also runs kube-controller-manager (Deployments,
	// ReplicaSets, disruption budgets, EndpointSlices, ServiceAccounts:
	// controlplane.ControllerManagerControllers), a few seconds more at
	// start.
	ControllerManager bool
	// PoolFirst..PoolLast are the loopback addresses of the squids (default:
	// the node agent's pool). Environments running at once need disjoint pools.
	PoolFirst, PoolLast netip.Addr
	// FleetTimeout bounds the wait for the sample fleet to be Ready
	// (default 3m).
	FleetTimeout time.Duration
	// GCPEndpoint, when set, is the Compute Engine endpoint the operator's
	// gcp provider uses instead of the fake (whatever natIP it reports
	// must be reachable from here). GCPProject is the provider's project
	// (default DefaultGCPProject).
	GCPEndpoint, GCPProject string
	// GCEPoolFirst..GCEPoolLast are the loopback addresses of the fake's
	// squids (default 127.0.3.2–127.0.3.254).
	GCEPoolFirst, GCEPoolLast netip.Addr
	// OperatorArgs are operator flags applied over the dev defaults, e.g.
	// --gc-interval=5s (bin/dev … -- FLAGS).
	OperatorArgs []string
}

// Env is a running dev environment. Fields are set as components start.
type Env struct {
	// Dir is Options.Dir.
	Dir string
	// ControlPlane is etcd + kube-apiserver.
	ControlPlane *controlplane.ControlPlane
	// KubeconfigPath is <Dir>/kubeconfig.
	KubeconfigPath string
	// Agent is the node agent.
	Agent *nodeagent.Agent
	// OriginURL is the local origin, e.g. http://127.0.0.1:8088.
	OriginURL string
	// DiscoveryURL and DiscoveryToken reach the HTTP discovery API (HTTPS;
	// CAPath verifies it, as HTTPClient does).
	DiscoveryURL   string
	DiscoveryToken string
	CAPath         string
	// GatewayURL is the forward-proxy gateway (plain HTTP, no credentials:
	// clients add theirs, the token as the password).
	GatewayURL string
	// MetricsURL is the operator's /metrics; HealthProbeURL its probe server
	// (/healthz, /readyz).
	MetricsURL     string
	HealthProbeURL string
	// APIServerPort is the aggregated ProxyLease API server's port.
	APIServerPort int
	// Operators are the operator processes (one unless Options.Operators).
	Operators []Operator
	// GCPEndpoint and GCPProject are what the operator's gcp provider
	// uses; GCE is the fake behind GCPEndpoint (nil with
	// Options.GCPEndpoint).
	GCPEndpoint, GCPProject string
	GCE                     *gcefake.Server
	// Fleet are the sample Proxies, Ready when Start returns.
	Fleet []types.NamespacedName

	opts       Options
	origin     *originComponent
	gceDir     string
	httpClient *http.Client

	started  []component
	failed   chan string
	stopping chan struct{}
	stopOnce sync.Once
	stopErr  error
}

// component is one piece of the environment.
type component interface {
	// name is shown in progress messages.
	name() string
	// start brings the component up and returns once it is usable; it may
	// rely on everything earlier components put into Env. ctx bounds the
	// start only: what keeps running must not stop when ctx ends. If start
	// fails it leaves nothing running.
	start(ctx context.Context, e *Env) error
	// stop tears the component down; called once, in reverse start order,
	// only for components whose start succeeded.
	stop(ctx context.Context) error
}

// watched components can fail while running.
type watched interface {
	// done is closed when the component stopped on its own (or was stopped).
	done() <-chan struct{}
}

func components() []component {
	return []component{
		&controlPlaneComponent{},
		&nodeAgentComponent{},
		&originComponent{},
		&gceComponent{},
		&operatorComponent{},
		&aggregationComponent{},
		&fleetComponent{},
	}
}

// Start brings the environment up, component by component, and writes
// <Dir>/ready once the sample fleet is Ready. On failure, or when ctx ends
// first, it tears down what it started and returns the error (errors.Is
// ctx.Err() in the second case).
func Start(ctx context.Context, opts Options) (*Env, error) {
	if opts.Dir == "" {
		return nil, errors.New("devenv: Options.Dir is required")
	}
	if opts.FleetTimeout <= 0 {
		opts.FleetTimeout = 3 * time.Minute
	}
	if opts.NodeName == "" {
		opts.NodeName = nodeagent.DefaultNodeName
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("devenv: %w", err)
	}
	opts.Dir = dir
	if err := os.MkdirAll(filepath.Join(dir, LogsDir), 0o755); err != nil {
		return nil, fmt.Errorf("devenv: creating %s: %w", dir, err)
	}
	// A previous run killed with SIGKILL may have left stale contract files.
	for _, f := range []string{ReadyFile, DiscoveryTokenFile, DiscoveryURLFile, GatewayURLFile, CAFile, KubeconfigFile} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	e := &Env{Dir: dir, opts: opts, stopping: make(chan struct{})}
	for _, c := range components() {
		e.progressf("starting %s", c.name())
		began := time.Now()
		if err := c.start(ctx, e); err != nil {
			if ctx.Err() != nil {
				e.progressf("interrupted while starting %s", c.name())
				return nil, errors.Join(ctx.Err(), e.Stop(context.Background()))
			}
			return nil, errors.Join(fmt.Errorf("starting %s: %w", c.name(), err), e.Stop(context.Background()))
		}
		e.started = append(e.started, c)
		e.progressf("  %s up in %s", c.name(), time.Since(began).Round(100*time.Millisecond))
	}
	if err := writeFileAtomic(e.path(ReadyFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, errors.Join(fmt.Errorf("writing the ready file: %w", err), e.Stop(context.Background()))
	}
	e.watch()
	return e, nil
}

// HTTPClient reaches the HTTP discovery API, verifying it against CAPath.
func (e *Env) HTTPClient() *http.Client { return e.httpClient }

// LeaseClient is a client of the HTTP lease API at url ("": DiscoveryURL;
// an Operator's own URL reaches that replica) with the run's token,
// verifying the operator's CA, as README shows.
func (e *Env) LeaseClient(url string) (*dclient.Client, error) {
	if url == "" {
		url = e.DiscoveryURL
	}
	roots, err := dclient.LoadCAFile(e.CAPath)
	if err != nil {
		return nil, err
	}
	return dclient.New(url, e.DiscoveryToken, dclient.WithRootCAs(roots))
}

// Failed delivers the name of a component that stopped on its own while the
// environment was up (etcd or kube-apiserver died, the operator returned).
func (e *Env) Failed() <-chan string { return e.failed }

func (e *Env) watch() {
	e.failed = make(chan string, len(e.started))
	for _, c := range e.started {
		w, ok := c.(watched)
		if !ok {
			continue
		}
		go func() {
			select {
			case <-w.done():
				select {
				case <-e.stopping:
				default:
					e.failed <- c.name()
				}
			case <-e.stopping:
			}
		}()
	}
}

// Stop removes the ready file, then stops every started component in
// reverse order. It is idempotent; the error joins every component's.
func (e *Env) Stop(ctx context.Context) error {
	e.stopOnce.Do(func() {
		close(e.stopping)
		_ = os.Remove(e.path(ReadyFile))
		var errs []error
		for i := len(e.started) - 1; i >= 0; i-- {
			c := e.started[i]
			e.progressf("stopping %s", c.name())
			if err := c.stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("stopping %s: %w", c.name(), err))
			}
		}
		e.started = nil
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

// OriginHits is how many requests reached the origin server.
func (e *Env) OriginHits() int64 {
	if e.origin == nil {
		return 0
	}
	return e.origin.hits.Load()
}

// LogPath is the path of one of the logs in <Dir>/logs (operator.log,
// nodeagent.log).
func (e *Env) LogPath(name string) string { return e.path(LogsDir, name) }

// ProcessDirs are the directories every child process of the environment
// names on its command line (etcd, kube-apiserver, each squid): a process
// still naming one after Stop was left behind (see ProcessesUsing).
func (e *Env) ProcessDirs() []string {
	dirs := []string{e.Dir}
	if e.Agent != nil {
		dirs = append(dirs, e.Agent.BaseDir())
	}
	if e.gceDir != "" {
		dirs = append(dirs, e.gceDir)
	}
	return dirs
}

func (e *Env) path(parts ...string) string {
	return filepath.Join(append([]string{e.Dir}, parts...)...)
}

func (e *Env) progressf(format string, args ...any) {
	if e.opts.Progress != nil {
		fmt.Fprintf(e.opts.Progress, "dev: "+format+"\n", args...)
	}
}

// FileLogger returns a human-readable (console encoding, info level) logger
// writing to path, created or truncated.
func FileLogger(path string) (logr.Logger, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return logr.Logger{}, fmt.Errorf("creating log directory: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return logr.Logger{}, fmt.Errorf("creating log file: %w", err)
	}
	return zap.New(zap.WriteTo(f), zap.UseDevMode(false), zap.ConsoleEncoder(), zap.Level(zapcore.InfoLevel),
		func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder }), nil
}

// writeFileAtomic writes then renames, so a reader never sees half a file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// listen opens 127.0.0.1:port (0: a free port).
func listen(port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1:%d (choose another port, or 0 for a free one): %w", port, err)
	}
	return ln, nil
}
