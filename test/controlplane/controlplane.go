package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/proxy-operator/proxy-operator/artifacts/crds"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

// BinDirEnv overrides where the etcd and kube-apiserver binaries are found.
const BinDirEnv = "PROXY_OPERATOR_BIN_DIR"

// modulePath identifies the repository root when walking up to go.mod.
const modulePath = "github.com/proxy-operator/proxy-operator"

const (
	// tempDirPrefix names control-plane directories under os.TempDir, so that
	// leftovers of a killed test binary can be recognised and removed.
	tempDirPrefix = "proxy-operator-cp-"
	ownerFile     = "owner.pid"

	defaultStartTimeout = 90 * time.Second
	defaultStopGrace    = 5 * time.Second

	// AdminUser is the user name of the admin client certificate.
	AdminUser = "proxy-operator-admin"
	// FrontProxyClientName is the CN the aggregation layer presents to
	// aggregated API servers (--requestheader-allowed-names).
	FrontProxyClientName = "front-proxy-client"
	// ServiceAccountIssuer is the issuer of service-account tokens.
	ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
)

// Options configure Start. The zero value is a working configuration.
type Options struct {
	// BinDir holds etcd and kube-apiserver. Default: $PROXY_OPERATOR_BIN_DIR,
	// else bin/ at the repository root (found by walking up to go.mod).
	BinDir string
	// Dir holds certificates, the kubeconfig, etcd data and logs. Default: a
	// new temporary directory. Either way Stop removes it unless KeepDir.
	// A given Dir is emptied first.
	Dir string
	// KeepDir leaves Dir in place after Stop (for inspecting logs).
	KeepDir bool
	// CRDFS provides the CRDs to install: every *.yaml / *.yml file in it
	// (multi-document files allowed). Default: the project's CRDs (crds.FS).
	CRDFS fs.FS
	// SkipCRDs installs no CRDs even if CRDFS is set.
	SkipCRDs bool
	// Out, when set, also receives the children's output, each line prefixed
	// with the process name. The logs are always written to files in Dir.
	Out io.Writer
	// APIServerFlags add to or override kube-apiserver flags (keys without
	// leading dashes, e.g. "v": "4").
	APIServerFlags map[string]string
	// ServingHosts are names and addresses the serving certificate holds
	// besides loopback and the kubernetes Service's names: a real node's
	// address and the Service's ClusterIP, when kube-apiserver serves one
	// (make cluster).
	ServingHosts []string
	// KubeletClient makes kube-apiserver present a client certificate
	// (group system:masters) to kubelets, for logs, exec and port-forward
	// on a real node.
	KubeletClient bool
	// EtcdFlags add to or override etcd flags.
	EtcdFlags map[string]string
	// ControllerManager also runs kube-controller-manager with
	// ControllerManagerControllers() (Deployments, ReplicaSets, disruption
	// budgets, EndpointSlices, ServiceAccounts). Off by default: it costs a
	// few seconds of start-up and most tests need none of it.
	ControllerManager bool
	// ControllerManagerFlags add to or override its flags.
	ControllerManagerFlags map[string]string
	// StartTimeout bounds Start when ctx has no earlier deadline. Default 90s.
	StartTimeout time.Duration
	// StopGracePeriod is how long Stop waits after SIGTERM before SIGKILL.
	// Default 5s.
	StopGracePeriod time.Duration
}

// ControlPlane is a running etcd + kube-apiserver pair. All paths are inside
// Dir.
type ControlPlane struct {
	// Dir holds everything below; removed by Stop unless Options.KeepDir.
	Dir string
	// KubeconfigPath is an admin kubeconfig with all credentials embedded.
	KubeconfigPath string
	// Host is the apiserver URL, https://127.0.0.1:<port>.
	Host string
	// EtcdURL is etcd's client URL.
	EtcdURL string

	// CACertPath is the CA that signed the apiserver serving certificate.
	CACertPath string
	// ClientCACertPath/ClientCAKeyPath: the CA kube-apiserver trusts for
	// client certificates (--client-ca-file); use ClientConfigFor to mint one.
	ClientCACertPath string
	ClientCAKeyPath  string
	// RequestHeaderCACertPath/KeyPath: the front-proxy CA
	// (--requestheader-client-ca-file).
	RequestHeaderCACertPath string
	RequestHeaderCAKeyPath  string
	// ProxyClientCertPath/KeyPath: the client certificate (CN
	// front-proxy-client) kube-apiserver presents to aggregated servers.
	ProxyClientCertPath string
	ProxyClientKeyPath  string
	// ServiceAccountKeyPath is the public key verifying service-account
	// tokens; ServiceAccountSigningKeyPath the private key signing them.
	ServiceAccountKeyPath        string
	ServiceAccountSigningKeyPath string
	// EtcdLogPath, APIServerLogPath and ControllerManagerLogPath are the
	// children's logs.
	EtcdLogPath              string
	APIServerLogPath         string
	ControllerManagerLogPath string

	servingCA, clientCA, admin         *keyPair
	etcd, apiserver, controllerManager *process
	opts                               Options

	done chan struct{} // closed once etcd or kube-apiserver has exited

	stopOnce sync.Once
	stopErr  error
}

// Start brings up etcd and kube-apiserver, waits for /readyz, writes the
// admin kubeconfig and installs the CRDs (waiting until they are
// Established). On failure everything started is stopped and the directory
// removed; the error names the process that failed and ends with its log.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if opts.CRDFS == nil {
		opts.CRDFS = crds.FS
	}
	if opts.StopGracePeriod <= 0 {
		opts.StopGracePeriod = defaultStopGrace
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	binDir, err := resolveBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	opts.BinDir = binDir
	bins := []string{"etcd", "kube-apiserver"}
	if opts.ControllerManager {
		bins = append(bins, "kube-controller-manager")
	}
	for _, name := range bins {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, fmt.Errorf("%s not found in %s (run `make tools`): %w", name, binDir, err)
		}
	}
	removeStaleTempDirs()

	// Free ports are found by binding :0 and closing; another process can
	// grab one before etcd/kube-apiserver bind it. Retry a few times then.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		cp, err := startOnce(ctx, opts)
		if err == nil {
			return cp, nil
		}
		var se *startError
		if attempt < attempts && errors.As(err, &se) && strings.Contains(se.logTail, "address already in use") && ctx.Err() == nil {
			continue
		}
		return nil, err
	}
}

// StartForTest starts a control plane and registers Stop with t.Cleanup. If
// the test failed, the tail of each process log is logged before the
// directory goes away.
func StartForTest(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	cp, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last lines of etcd log ---\n%s", logtail.File(cp.EtcdLogPath, 30))
			t.Logf("--- last lines of kube-apiserver log ---\n%s", logtail.File(cp.APIServerLogPath, 60))
			if opts.ControllerManager {
				t.Logf("--- last lines of kube-controller-manager log ---\n%s", logtail.File(cp.ControllerManagerLogPath, 40))
			}
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
	})
	return cp
}

func startOnce(ctx context.Context, opts Options) (_ *ControlPlane, retErr error) {
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", tempDirPrefix)
		if err != nil {
			return nil, fmt.Errorf("creating control plane dir: %w", err)
		}
		dir = d
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", dir, err)
		}
		dir = abs
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("emptying %s: %w", dir, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	cp := &ControlPlane{
		Dir:                      dir,
		KubeconfigPath:           filepath.Join(dir, "kubeconfig"),
		EtcdLogPath:              filepath.Join(dir, "etcd.log"),
		APIServerLogPath:         filepath.Join(dir, "kube-apiserver.log"),
		ControllerManagerLogPath: filepath.Join(dir, "kube-controller-manager.log"),
		opts:                     opts,
		done:                     make(chan struct{}),
	}
	defer func() {
		if retErr != nil {
			if err := cp.Stop(); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("cleaning up: %w", err))
			}
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return cp, fmt.Errorf("writing owner file: %w", err)
	}
	if err := cp.writeCerts(); err != nil {
		return cp, err
	}
	ports, err := ports.Free(3)
	if err != nil {
		return cp, err
	}
	if err := cp.startEtcd(ctx, ports[0], ports[1]); err != nil {
		return cp, err
	}
	if err := cp.startAPIServer(ctx, ports[2]); err != nil {
		return cp, err
	}
	if err := cp.writeKubeconfig(); err != nil {
		return cp, err
	}
	if !opts.SkipCRDs {
		if err := InstallCRDs(ctx, cp.RESTConfig(), opts.CRDFS); err != nil {
			return cp, err
		}
	}
	if opts.ControllerManager {
		if err := cp.startControllerManager(ctx); err != nil {
			return cp, err
		}
	}
	go func() {
		select {
		case <-cp.etcd.done:
		case <-cp.apiserver.done:
		}
		close(cp.done)
	}()
	return cp, nil
}

func (cp *ControlPlane) writeCerts() error {
	dir := filepath.Join(cp.Dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	var err error
	if cp.servingCA, err = newCA("proxy-operator-serving-ca"); err != nil {
		return err
	}
	if cp.clientCA, err = newCA("proxy-operator-client-ca"); err != nil {
		return err
	}
	frontProxyCA, err := newCA("proxy-operator-front-proxy-ca")
	if err != nil {
		return err
	}
	serving, err := cp.servingCA.issue("kube-apiserver", nil, x509.ExtKeyUsageServerAuth, append([]string{
		"127.0.0.1", "::1", "10.0.0.1", "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}, cp.opts.ServingHosts...))
	if err != nil {
		return err
	}
	if cp.opts.KubeletClient {
		kubeletClient, err := cp.clientCA.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil)
		if err != nil {
			return err
		}
		if _, _, err := kubeletClient.write(dir, "kubelet-client"); err != nil {
			return err
		}
	}
	if cp.admin, err = cp.clientCA.issue(AdminUser, []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil); err != nil {
		return err
	}
	proxyClient, err := frontProxyCA.issue(FrontProxyClientName, nil, x509.ExtKeyUsageClientAuth, nil)
	if err != nil {
		return err
	}

	if cp.CACertPath, _, err = cp.servingCA.write(dir, "serving-ca"); err != nil {
		return err
	}
	if cp.ClientCACertPath, cp.ClientCAKeyPath, err = cp.clientCA.write(dir, "client-ca"); err != nil {
		return err
	}
	if cp.RequestHeaderCACertPath, cp.RequestHeaderCAKeyPath, err = frontProxyCA.write(dir, "front-proxy-ca"); err != nil {
		return err
	}
	if cp.ProxyClientCertPath, cp.ProxyClientKeyPath, err = proxyClient.write(dir, "front-proxy-client"); err != nil {
		return err
	}
	if _, _, err = serving.write(dir, "apiserver"); err != nil {
		return err
	}
	if cp.ServiceAccountKeyPath, cp.ServiceAccountSigningKeyPath, err = writeServiceAccountKeys(dir); err != nil {
		return err
	}
	return nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	flags := map[string]string{
		"name":                        "default",
		"data-dir":                    filepath.Join(cp.Dir, "etcd"),
		"listen-client-urls":          clientURL,
		"advertise-client-urls":       clientURL,
		"listen-peer-urls":            peerURL,
		"initial-advertise-peer-urls": peerURL,
		"initial-cluster":             "default=" + peerURL,
		// Throwaway data: durability buys nothing and fsync is most of
		// etcd's write latency.
		"unsafe-no-fsync": "true",
		"log-level":       "warn",
	}
	mergeFlags(flags, cp.opts.EtcdFlags)
	p, err := startProcess("etcd", filepath.Join(cp.opts.BinDir, "etcd"), flagArgs(flags), cp.EtcdLogPath, cp.opts.Out)
	if err != nil {
		return err
	}
	cp.etcd = p
	cp.EtcdURL = clientURL
	client := &http.Client{Timeout: 2 * time.Second}
	err = poll(ctx, p, func() bool {
		resp, err := client.Get(clientURL + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return &startError{process: "etcd", err: err, logTail: p.tail(30)}
	}
	return nil
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, port int) error {
	pki := filepath.Join(cp.Dir, "pki")
	flags := map[string]string{
		"etcd-servers":         cp.EtcdURL,
		"bind-address":         "127.0.0.1",
		"advertise-address":    "127.0.0.1",
		"secure-port":          strconv.Itoa(port),
		"cert-dir":             pki,
		"tls-cert-file":        filepath.Join(pki, "apiserver.crt"),
		"tls-private-key-file": filepath.Join(pki, "apiserver.key"),
		"client-ca-file":       cp.ClientCACertPath,
		"authorization-mode":   "RBAC",

		"service-account-issuer":           ServiceAccountIssuer,
		"service-account-key-file":         cp.ServiceAccountKeyPath,
		"service-account-signing-key-file": cp.ServiceAccountSigningKeyPath,
		"service-cluster-ip-range":         "10.0.0.0/24",
		"allow-privileged":                 "true",
		// No controller-manager creates the default ServiceAccount, so the
		// ServiceAccount admission plugin would reject every pod.
		"disable-admission-plugins": "ServiceAccount",
		// Endpoints cannot hold loopback addresses; the reconciler would
		// only log errors.
		"endpoint-reconciler-type": "none",

		// Aggregation: kube-apiserver publishes these in
		// kube-system/extension-apiserver-authentication for aggregated
		// servers. Aggregator routing stays off so an ExternalName Service
		// (externalName: localhost) can front a local aggregated server.
		"requestheader-client-ca-file":       cp.RequestHeaderCACertPath,
		"requestheader-allowed-names":        FrontProxyClientName,
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             cp.ProxyClientCertPath,
		"proxy-client-key-file":              cp.ProxyClientKeyPath,

		// Exit promptly on SIGTERM; Stop kills after a grace period anyway.
		"shutdown-delay-duration": "0s",
		"profiling":               "false",
	}
	if cp.opts.KubeletClient {
		flags["kubelet-client-certificate"] = filepath.Join(pki, "kubelet-client.crt")
		flags["kubelet-client-key"] = filepath.Join(pki, "kubelet-client.key")
		flags["kubelet-preferred-address-types"] = "InternalIP"
	}
	mergeFlags(flags, cp.opts.APIServerFlags)
	p, err := startProcess("kube-apiserver", filepath.Join(cp.opts.BinDir, "kube-apiserver"), flagArgs(flags), cp.APIServerLogPath, cp.opts.Out)
	if err != nil {
		return err
	}
	cp.apiserver = p
	cp.Host = fmt.Sprintf("https://127.0.0.1:%d", port)

	tlsConfig, err := cp.adminTLSConfig()
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	defer client.CloseIdleConnections()
	err = poll(ctx, p, func() bool {
		resp, err := client.Get(cp.Host + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return &startError{process: "kube-apiserver", err: err, logTail: p.tail(40)}
	}
	return nil
}

func (cp *ControlPlane) adminTLSConfig() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(cp.admin.certPEM, cp.admin.keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading admin certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cp.servingCA.cert)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// poll calls ready every 100ms until it returns true, the process exits or
// ctx ends.
func poll(ctx context.Context, p *process, ready func() bool) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := p.exitError(); err != nil {
			return err
		}
		if ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", ctx.Err())
		case <-p.done:
		case <-tick.C:
		}
	}
}

// RESTConfig returns a new admin (system:masters) config. Client-side rate
// limiting is raised far above client-go's default 5 QPS because tests
// create objects in bursts.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return cp.restConfig(cp.admin)
}

// ClientConfigFor mints a client certificate for user in groups (signed by
// the client CA) and returns a config authenticating as that user. Such a
// user has no permissions beyond what RBAC grants it.
func (cp *ControlPlane) ClientConfigFor(user string, groups ...string) (*rest.Config, error) {
	kp, err := cp.clientCA.issue(user, groups, x509.ExtKeyUsageClientAuth, nil)
	if err != nil {
		return nil, fmt.Errorf("issuing client certificate for %q: %w", user, err)
	}
	return cp.restConfig(kp), nil
}

func (cp *ControlPlane) restConfig(kp *keyPair) *rest.Config {
	return &rest.Config{
		Host: cp.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.servingCA.certPEM,
			CertData: kp.certPEM,
			KeyData:  kp.keyPEM,
		},
		QPS:   1000,
		Burst: 2000,
	}
}

func (cp *ControlPlane) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy-operator"] = &clientcmdapi.Cluster{
		Server:                   cp.Host,
		CertificateAuthorityData: cp.servingCA.certPEM,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cp.admin.certPEM,
		ClientKeyData:         cp.admin.keyPEM,
	}
	cfg.Contexts["proxy-operator"] = &clientcmdapi.Context{Cluster: "proxy-operator", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "proxy-operator"
	if err := clientcmd.WriteToFile(*cfg, cp.KubeconfigPath); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// Done is closed once etcd or kube-apiserver has exited, whether by Stop or
// by crashing. Long-running users (make dev) watch it.
func (cp *ControlPlane) Done() <-chan struct{} { return cp.done }

// Stop terminates kube-apiserver, then etcd (SIGTERM to each process group,
// SIGKILL after the grace period) and removes Dir unless KeepDir. It is
// idempotent and safe on a partly started control plane.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		var errs []error
		for _, p := range []*process{cp.controllerManager, cp.apiserver, cp.etcd} {
			if p == nil {
				continue
			}
			if err := p.stop(cp.opts.StopGracePeriod); err != nil {
				errs = append(errs, err)
			}
		}
		if !cp.opts.KeepDir && cp.Dir != "" {
			if err := os.RemoveAll(cp.Dir); err != nil {
				errs = append(errs, fmt.Errorf("removing %s: %w", cp.Dir, err))
			}
		}
		cp.stopErr = errors.Join(errs...)
	})
	return cp.stopErr
}

// PIDs returns the process ids of the running children by name ("etcd",
// "kube-apiserver"), so benchmarks can read their CPU time.
func (cp *ControlPlane) PIDs() map[string]int { return cp.pids() }

// pids returns the process ids of the running children.
func (cp *ControlPlane) pids() map[string]int {
	out := map[string]int{}
	for _, p := range []*process{cp.etcd, cp.apiserver, cp.controllerManager} {
		if p != nil {
			out[p.name] = p.pid()
		}
	}
	return out
}

func mergeFlags(dst, overrides map[string]string) {
	for k, v := range overrides {
		dst[strings.TrimLeft(k, "-")] = v
	}
}

// BinDir is where the pinned tools are: $PROXY_OPERATOR_BIN_DIR, else bin/
// at the repository root.
func BinDir() (string, error) { return resolveBinDir("") }

func resolveBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv(BinDirEnv)
	}
	if dir != "" {
		return filepath.Abs(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("locating bin/ (set %s to override): %w", BinDirEnv, err)
	}
	return filepath.Join(root, "bin"), nil
}

// RepoRoot walks up from the working directory to the go.mod of this module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getting working directory: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isModule(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func isModule(gomod []byte) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == "module" && strings.Trim(fields[1], `"`) == modulePath {
			return true
		}
	}
	return false
}

// removeStaleTempDirs deletes control-plane temp dirs whose owning process is
// gone: a test binary killed by a signal or timeout cannot run Stop, but the
// kernel (Pdeathsig) has already killed its children.
func removeStaleTempDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
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
