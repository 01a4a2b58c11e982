package devenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// runStopTimeout bounds waiting for a long-running component to return.
const runStopTimeout = 60 * time.Second

// controlPlaneComponent runs etcd + kube-apiserver with the CRDs installed
// and publishes <Dir>/kubeconfig.
type controlPlaneComponent struct {
	cp         *controlplane.ControlPlane
	kubeconfig string
}

func (c *controlPlaneComponent) name() string { return "control plane (etcd, kube-apiserver)" }

func (c *controlPlaneComponent) start(ctx context.Context, e *Env) error {
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: e.path(ControlPlaneDir)})
	if err != nil {
		return err
	}
	data, err := os.ReadFile(cp.KubeconfigPath)
	if err == nil {
		err = writeFileAtomic(e.path(KubeconfigFile), data, 0o600)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("publishing kubeconfig: %w", err), cp.Stop())
	}
	c.cp, c.kubeconfig = cp, e.path(KubeconfigFile)
	e.ControlPlane, e.KubeconfigPath = cp, c.kubeconfig
	return nil
}

func (c *controlPlaneComponent) stop(context.Context) error {
	_ = os.Remove(c.kubeconfig)
	return c.cp.Stop()
}

func (c *controlPlaneComponent) done() <-chan struct{} { return c.cp.Done() }

// runner runs a long-running function on its own context (not the start
// context: Ctrl-C must stop components in order, not all at once).
type runner struct {
	cancel context.CancelFunc
	doneCh chan struct{}
	err    error
}

func run(ctx context.Context, f func(context.Context) error) *runner {
	ctx, cancel := context.WithCancel(ctx)
	r := &runner{cancel: cancel, doneCh: make(chan struct{})}
	go func() {
		defer close(r.doneCh)
		r.err = f(ctx)
	}()
	return r
}

func (r *runner) done() <-chan struct{} { return r.doneCh }

// stopAndWait cancels and waits for the function to return.
func (r *runner) stopAndWait(ctx context.Context) error {
	r.cancel()
	t := time.NewTimer(runStopTimeout)
	defer t.Stop()
	select {
	case <-r.doneCh:
		return r.err
	case <-t.C:
		return fmt.Errorf("did not stop within %s", runStopTimeout)
	case <-ctx.Done():
		return fmt.Errorf("did not stop: %w", ctx.Err())
	}
}

// nodeAgentComponent runs the node agent: the kubelet of the operator's pods.
type nodeAgentComponent struct{ *runner }

func (c *nodeAgentComponent) name() string { return "node agent (squid per operator pod)" }

func (c *nodeAgentComponent) start(ctx context.Context, e *Env) error {
	if _, err := nodeagent.LookSquid(""); err != nil {
		return fmt.Errorf("%w (install it with `make squid`)", err)
	}
	logger, err := FileLogger(e.LogPath("nodeagent.log"))
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(e.ControlPlane.RESTConfig(), nodeagent.Options{
		NodeName:  e.opts.NodeName,
		Log:       logger,
		PoolFirst: e.opts.PoolFirst,
		PoolLast:  e.opts.PoolLast,
	})
	if err != nil {
		return err
	}
	c.runner = run(context.Background(), agent.Run)
	t := time.NewTimer(runStopTimeout)
	defer t.Stop()
	select {
	case <-agent.Ready():
		e.Agent = agent
		return nil
	case <-c.doneCh:
		return fmt.Errorf("node agent stopped before it was ready: %v", c.err)
	case <-t.C:
		err = fmt.Errorf("node agent not ready within %s", runStopTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	return errors.Join(err, c.stopAndWait(context.Background()))
}

func (c *nodeAgentComponent) stop(ctx context.Context) error { return c.stopAndWait(ctx) }

// originComponent is a local HTTP origin on 127.0.0.1: health checks and
// curl examples fetch it through the squids.
type originComponent struct {
	srv    *http.Server
	doneCh chan struct{}
	hits   atomic.Int64
}

func (c *originComponent) name() string { return "origin HTTP server" }

func (c *originComponent) start(_ context.Context, e *Env) error {
	ln, err := listen(e.opts.Ports.Origin)
	if err != nil {
		return err
	}
	c.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.hits.Add(1)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintf(w, "proxy-operator dev origin: %s %s via=%q\n", r.Method, r.URL.Path, r.Header.Get("Via"))
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	c.doneCh = make(chan struct{})
	go func() {
		defer close(c.doneCh)
		_ = c.srv.Serve(ln)
	}()
	e.OriginURL = "http://" + ln.Addr().String()
	e.origin = c
	return nil
}

func (c *originComponent) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(ctx); err != nil {
		_ = c.srv.Close()
	}
	return nil
}

func (c *originComponent) done() <-chan struct{} { return c.doneCh }

// operatorComponent runs the operator in this process, as cmd/proxy-operator
// would with the flags Options describes.
type operatorComponent struct {
	*runner
	apiListener net.Listener
	files       []string
}

func (c *operatorComponent) name() string {
	return "operator (reconciler, health, discovery API, aggregated API server)"
}

func (c *operatorComponent) start(ctx context.Context, e *Env) (retErr error) {
	defer func() {
		if retErr != nil {
			c.removeFiles()
			if c.apiListener != nil {
				_ = c.apiListener.Close()
			}
		}
	}()
	ports := e.opts.Ports
	discoveryPort, err := reserve(ports.Discovery)
	if err != nil {
		return fmt.Errorf("discovery API: %w", err)
	}
	metricsPort, err := reserve(ports.Metrics)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	probePort, err := reserve(ports.Probes)
	if err != nil {
		return fmt.Errorf("health probes: %w", err)
	}
	// The aggregated server takes an open listener: no race for its port.
	if c.apiListener, err = listen(ports.APIServer); err != nil {
		return fmt.Errorf("aggregated API server: %w", err)
	}
	apiPort := c.apiListener.Addr().(*net.TCPAddr).Port

	opts := Operator(e.Agent.NodeName())
	opts.GCP.Project, opts.GCP.Endpoint = e.GCPProject, e.GCPEndpoint
	if len(e.opts.OperatorArgs) > 0 {
		fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
		opts.AddFlags(fs)
		if err := fs.Parse(e.opts.OperatorArgs); err != nil {
			return fmt.Errorf("operator flags %q: %w", e.opts.OperatorArgs, err)
		}
	}
	opts.MetricsAddr = hostPort(metricsPort)
	opts.HealthProbeAddr = hostPort(probePort)
	opts.Discovery.Addr = hostPort(discoveryPort)
	opts.APIServer.SecureServing.Listener = c.apiListener
	opts.APIServer.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	opts.APIServer.SecureServing.BindPort = apiPort
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("operator options: %w", err)
	}

	cfg := e.ControlPlane.RESTConfig()
	// The namespace and the APIService exist before the operator starts, as
	// after an install: it writes its certificate Secret into the one and its
	// CA into the other's caBundle at start.
	if err := registerAPIService(ctx, cfg, apiPort); err != nil {
		return err
	}
	c.runner = run(log.IntoContext(context.Background(), e.opts.Log), func(ctx context.Context) error {
		return app.Run(ctx, cfg, opts)
	})
	probeURL := "http://" + hostPort(probePort)
	discoveryURL := "https://" + hostPort(discoveryPort)
	if err := c.waitOK(ctx, http.DefaultClient, probeURL+"/readyz", 90*time.Second); err != nil {
		return errors.Join(err, c.stopAndWait(context.Background()))
	}
	// What the operator made at start: its CA and the token Secret.
	token, caPEM, err := c.readOperatorSecrets(ctx, cfg, opts)
	if err != nil {
		return errors.Join(err, c.stopAndWait(context.Background()))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.Join(errors.New("the operator's CA ConfigMap holds no certificate"), c.stopAndWait(context.Background()))
	}
	e.httpClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	if err := c.waitOK(ctx, e.httpClient, discoveryURL+"/healthz", 90*time.Second); err != nil {
		return errors.Join(err, c.stopAndWait(context.Background()))
	}
	for _, f := range []struct {
		name string
		data string
		mode os.FileMode
	}{{CAFile, string(caPEM), 0o644}, {DiscoveryTokenFile, token + "\n", 0o600}, {DiscoveryURLFile, discoveryURL + "\n", 0o644}} {
		p := e.path(f.name)
		if err := writeFileAtomic(p, []byte(f.data), f.mode); err != nil {
			return errors.Join(fmt.Errorf("writing %s: %w", p, err), c.stopAndWait(context.Background()))
		}
		c.files = append(c.files, p)
	}
	e.DiscoveryURL, e.DiscoveryToken, e.CAPath = discoveryURL, token, e.path(CAFile)
	e.MetricsURL, e.HealthProbeURL = "http://"+hostPort(metricsPort)+"/metrics", probeURL
	e.APIServerPort = apiPort
	return nil
}

// readOperatorSecrets reads the discovery token the operator generated into
// its token Secret and the CA it published in its CA ConfigMap.
func (c *operatorComponent) readOperatorSecrets(ctx context.Context, cfg *rest.Config, opts *app.Options) (token string, caPEM []byte, err error) {
	kube, err := clientset.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	ts := &discovery.TokenSecret{Secrets: kube.CoreV1(), Namespace: opts.Namespace, Name: opts.Discovery.TokenSecret}
	tokens, err := ts.Load(ctx)
	if err != nil {
		return "", nil, err
	}
	for t, identity := range tokens {
		if identity == discovery.DefaultIdentity {
			token = t
		}
	}
	if token == "" {
		return "", nil, fmt.Errorf("the discovery token Secret holds no token of identity %q", discovery.DefaultIdentity)
	}
	cm, err := kube.CoreV1().ConfigMaps(opts.Namespace).Get(ctx, opts.Certs.CAConfigMap, metav1.GetOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("reading the operator's CA ConfigMap: %w", err)
	}
	return token, []byte(cm.Data[certs.KeyCAConfigMap]), nil
}

// waitOK polls url with hc until it answers 200, the operator stops, or
// timeout.
func (c *operatorComponent) waitOK(ctx context.Context, hc *http.Client, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: hc.Transport}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not OK within %s (last: %s)", url, timeout, last)
		}
		select {
		case <-c.doneCh:
			return fmt.Errorf("the operator stopped: %v", c.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *operatorComponent) stop(ctx context.Context) error {
	c.removeFiles()
	return c.stopAndWait(ctx)
}

func (c *operatorComponent) removeFiles() {
	for _, f := range c.files {
		_ = os.Remove(f)
	}
	c.files = nil
}

// Operator returns the operator options of the dev environment: the
// production defaults with both providers enabled (pods and Compute Engine
// VMs; Start sets the gcp endpoint and project), Squid pods pinned to the
// node agent's node and the provisioning and deletion polls shortened from 5s
// to 1s (a local squid starts in well under a second). Servers keep their
// production addresses; Start overrides them.
func Operator(nodeName string) *app.Options {
	opts := app.NewOptions()
	// As installed: its own certificate (also for localhost, where it runs
	// here) and a generated token, both in its namespace.
	opts.Namespace = apiserver.DefaultServiceNamespace
	opts.Certs.SecretName = ServingCertSecret
	opts.Certs.Hosts = []string{"localhost", "127.0.0.1"}
	opts.Discovery.TokenSecret = DiscoveryTokenSecret
	opts.Checkpoint.SecretName = LeaseCheckpointSecret
	opts.LeaseIDs.SecretName = LeaseSigningSecret
	opts.Providers = []string{kubernetes.Name, gcp.Name}
	opts.Kubernetes.NodeName = nodeName
	opts.Intervals.ProvisioningPoll = time.Second
	opts.Intervals.DeletionPoll = time.Second
	return opts
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
