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
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

// Dev leader election: short, so that a killed leader is replaced quickly.
var electionArgs = []string{"--leader-elect", "--leader-election-namespace=" + apiserver.DefaultServiceNamespace,
	"--leader-election-lease-duration=6s", "--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"}

// operatorComponent runs the operator as its own processes (bin/proxy-operator),
// Options.Operators of them (leader-elected when more than one), each
// restarted whenever it exits as a kubelet restarts a container. With one,
// it listens on the dev ports itself; with more, each listens on ports of
// its own and a service (what a Kubernetes Service is) forwards the dev
// ports to the one that is ready. Either way the addresses stay across
// restarts and handovers.
type operatorComponent struct {
	replicas []*replica
	services []*service
	files    []string
}

func (c *operatorComponent) name() string {
	return "operator (reconciler, health, discovery API, aggregated API server)"
}

func (c *operatorComponent) start(ctx context.Context, e *Env) (retErr error) {
	defer func() {
		if retErr != nil {
			_ = c.stop(context.Background())
		}
	}()
	n := max(e.opts.Operators, 1)
	binary := e.opts.OperatorBinary
	if binary == "" {
		var err error
		if binary, err = framework.OperatorBinary(e.path("bin")); err != nil {
			return err
		}
	}
	front := e.opts.Ports
	replicaPorts := make([]Ports, n)
	// Held until the replicas start, so that no two of their ports (nor the
	// front service's) are the same.
	var reserved ports.Reservation
	defer reserved.Release()
	if n == 1 {
		var err error
		if replicaPorts[0], err = reservePorts(&reserved, front); err != nil {
			return err
		}
	} else {
		for i := range replicaPorts {
			var err error
			if replicaPorts[i], err = reservePorts(&reserved, Ports{}); err != nil {
				return err
			}
		}
	}
	// The replicas' flags name the front discovery port, known below.
	args := func(p Ports) []string {
		a := OperatorArgs(e, p, front.Discovery)
		if n > 1 {
			a = append(a, electionArgs...)
		}
		return append(a, e.opts.OperatorArgs...)
	}
	for i := range replicaPorts {
		name, pidFile := "operator", e.path("operator.pid")
		if n > 1 {
			name, pidFile = fmt.Sprintf("operator-%d", i), e.path(fmt.Sprintf("operator-%d.pid", i))
		}
		r := &replica{name: name, binary: binary, ports: replicaPorts[i],
			pidFile: pidFile, logPath: e.path(LogsDir, name+".log"), progress: e.progressf}
		c.replicas = append(c.replicas, r)
	}

	// The namespace and the APIService exist before the operator starts, as
	// after an install: it writes its certificate Secret into the one and its
	// CA into the other's caBundle at start.
	cfg := e.ControlPlane.RESTConfig()
	apiPort := replicaPorts[0].APIServer
	if n > 1 {
		// The service's ports: the dev ports, or free ones.
		for _, s := range []struct {
			port *int
			of   func(Ports) int
		}{
			{&front.Discovery, func(p Ports) int { return p.Discovery }},
			{&front.APIServer, func(p Ports) int { return p.APIServer }},
			{&front.Metrics, func(p Ports) int { return p.Metrics }},
			{&front.Probes, func(p Ports) int { return p.Probes }},
			{&front.Gateway, func(p Ports) int { return p.Gateway }},
		} {
			ln, err := listen(*s.port)
			if err != nil {
				return err
			}
			// As installed: the gateway's Service selects every replica,
			// the others the one that serves leases.
			svc := &service{ln: ln, replicas: c.replicas, portOf: s.of, everyReplica: s.port == &front.Gateway}
			c.services = append(c.services, svc)
			*s.port = ln.Addr().(*net.TCPAddr).Port
		}
		apiPort = front.APIServer
	} else {
		front = replicaPorts[0]
	}
	for _, r := range c.replicas {
		r.args = args(r.ports)
	}
	// Bad flags are reported now, not as a restart loop.
	if err := checkOperatorArgs(c.replicas[0].args); err != nil {
		return err
	}
	if err := registerAPIService(ctx, cfg, apiPort); err != nil {
		return err
	}
	reserved.Release()
	for _, r := range c.replicas {
		if err := r.start(); err != nil {
			return err
		}
	}
	for _, svc := range c.services {
		svc.serve()
	}

	probeURL := "http://" + hostPort(front.Probes)
	discoveryURL := "https://" + hostPort(front.Discovery)
	gatewayURL := "http://" + hostPort(front.Gateway)
	if err := c.waitOK(ctx, http.DefaultClient, probeURL+"/readyz", 120*time.Second); err != nil {
		return err
	}
	// What the operator made at start: its CA and the token Secret.
	token, caPEM, err := readOperatorSecrets(ctx, cfg)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.New("the operator's CA ConfigMap holds no certificate")
	}
	e.httpClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	if err := c.waitOK(ctx, e.httpClient, discoveryURL+"/healthz", 90*time.Second); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data string
		mode os.FileMode
	}{{CAFile, string(caPEM), 0o644}, {DiscoveryTokenFile, token + "\n", 0o600}, {DiscoveryURLFile, discoveryURL + "\n", 0o644}, {GatewayURLFile, gatewayURL + "\n", 0o644}} {
		p := e.path(f.name)
		if err := writeFileAtomic(p, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		c.files = append(c.files, p)
	}
	e.DiscoveryURL, e.DiscoveryToken, e.CAPath, e.GatewayURL = discoveryURL, token, e.path(CAFile), gatewayURL
	e.MetricsURL, e.HealthProbeURL = "http://"+hostPort(front.Metrics)+"/metrics", probeURL
	e.APIServerPort = apiPort
	e.Operators = nil
	for _, r := range c.replicas {
		e.Operators = append(e.Operators, Operator{Name: r.name, PIDFile: r.pidFile, LogPath: r.logPath,
			HealthProbeURL: "http://" + hostPort(r.ports.Probes), DiscoveryURL: "https://" + hostPort(r.ports.Discovery),
			GatewayURL: "http://" + hostPort(r.ports.Gateway)})
	}
	return nil
}

// reservePorts resolves the zero ports of p to free ones, held by r.
func reservePorts(r *ports.Reservation, p Ports) (Ports, error) {
	for _, fp := range []*int{&p.Discovery, &p.APIServer, &p.Metrics, &p.Probes, &p.Gateway} {
		port, err := r.Reserve(*fp)
		if err != nil {
			return p, err
		}
		*fp = port
	}
	return p, nil
}

// OperatorArgs are the operator's flags in the dev environment e on ports:
// as installed (its own certificate, also for localhost, where it runs here;
// a generated token, the lease checkpoint and signed lease IDs, all in its
// namespace), both providers (pods pinned to the node agent's node, Compute
// Engine VMs on e's endpoint and project), and the provisioning and deletion
// polls shortened from 5s to 1s (a local squid starts in well under a
// second), and the proxies' auth helpers polling the discovery API at the
// front port discoveryPort (the Service's) with the operator's own CA.
func OperatorArgs(e *Env, p Ports, discoveryPort int) []string {
	args := []string{
		"--kubeconfig=" + e.KubeconfigPath,
		"--namespace=" + apiserver.DefaultServiceNamespace,
		"--serving-cert-secret=" + ServingCertSecret, "--serving-cert-hosts=localhost,127.0.0.1",
		"--discovery-token-secret=" + DiscoveryTokenSecret,
		"--lease-checkpoint-secret=" + LeaseCheckpointSecret,
		"--lease-signing-secret=" + LeaseSigningSecret,
		"--providers=" + kubernetes.Name + "," + gcp.Name,
		"--kubernetes-pod-node-name=" + e.Agent.NodeName(),
		"--gcp-project=" + e.GCPProject, "--gcp-endpoint=" + e.GCPEndpoint,
		"--provisioning-poll-interval=1s", "--deletion-poll-interval=1s",
		"--metrics-bind-address=" + hostPort(p.Metrics),
		"--health-probe-bind-address=" + hostPort(p.Probes),
		"--discovery-bind-address=" + hostPort(p.Discovery),
		"--apiserver-bind-address=127.0.0.1", "--apiserver-secure-port=" + strconv.Itoa(p.APIServer),
		"--proxy-auth-operator-url=https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(discoveryPort)),
		"--gateway-bind-address=" + hostPort(p.Gateway),
		"--gateway-lease-api-url=https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(discoveryPort)),
	}
	// The local origin (and any site a dev fetches on loopback) is opened
	// to the proxies, which refuse internal ranges by default.
	return append(args, framework.LocalOriginArgs()...)
}

// checkOperatorArgs parses and validates args as the binary will.
func checkOperatorArgs(args []string) error {
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("operator flags %q: %w", strings.Join(args, " "), err)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("operator options: %w", err)
	}
	return nil
}

// readOperatorSecrets reads the discovery token the operator generated into
// its token Secret and the CA it published in its CA ConfigMap.
func readOperatorSecrets(ctx context.Context, cfg *rest.Config) (token string, caPEM []byte, err error) {
	kube, err := clientset.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	ts := &discovery.TokenSecret{Secrets: kube.CoreV1(), Namespace: apiserver.DefaultServiceNamespace, Name: DiscoveryTokenSecret}
	tokens, err := ts.Load(ctx)
	if err != nil {
		return "", nil, err
	}
	for t, identity := range tokens {
		if identity.Identity == discovery.DefaultIdentity {
			token = t
		}
	}
	if token == "" {
		return "", nil, fmt.Errorf("the discovery token Secret holds no token of identity %q", discovery.DefaultIdentity)
	}
	cm, err := kube.CoreV1().ConfigMaps(apiserver.DefaultServiceNamespace).Get(ctx, certs.DefaultCAConfigMap, metav1.GetOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("reading the operator's CA ConfigMap: %w", err)
	}
	return token, []byte(cm.Data[certs.KeyCAConfigMap]), nil
}

// waitOK polls url with hc until it answers 200 or timeout.
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
			logs := make([]string, 0, len(c.replicas))
			for _, r := range c.replicas {
				logs = append(logs, r.logPath)
			}
			return fmt.Errorf("%s not OK within %s (last: %s; logs: %s)", url, timeout, last, strings.Join(logs, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *operatorComponent) stop(ctx context.Context) error {
	for _, f := range c.files {
		_ = os.Remove(f)
	}
	c.files = nil
	var errs []error
	for _, svc := range c.services {
		svc.close()
	}
	// Leader first is not needed: each replica writes its last checkpoint
	// as it stops, and only the leader has one to write.
	for _, r := range c.replicas {
		if err := r.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Operator is one operator process of the environment.
type Operator struct {
	// Name is "operator", or "operator-<i>" with several.
	Name string
	// PIDFile holds the pid of the running process (rewritten at each
	// restart; absent while none runs).
	PIDFile string
	// LogPath is its log (every run appended).
	LogPath string
	// HealthProbeURL, DiscoveryURL and GatewayURL are this replica's own
	// (the Env's are the service's, with several).
	HealthProbeURL, DiscoveryURL, GatewayURL string
}

// Serving reports whether o answers /readyz with 200: it is the replica that
// serves leases.
func (o Operator) Serving() bool {
	resp, err := http.Get(o.HealthProbeURL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// PID reads o's pid file (0 if none).
func (o Operator) PID() int {
	b, err := os.ReadFile(o.PIDFile)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}
