package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/devenv"
)

// Layout of .dev/ beyond the devenv contract.
const (
	devDirName = ".dev"
	lockFile   = "dev.lock"
)

// teardownTimeout bounds stopping all components; each child process gets a
// SIGKILL after its own grace period well before this.
const teardownTimeout = 90 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "dev: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ports := devenv.DefaultPorts()
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.IntVar(&ports.Discovery, "discovery-port", ports.Discovery, "port of the HTTP discovery API on 127.0.0.1 (0: a free port)")
	fs.IntVar(&ports.APIServer, "apiserver-port", ports.APIServer, "port of the aggregated ProxyLease API server on 127.0.0.1 (0: a free port)")
	fs.IntVar(&ports.Metrics, "metrics-port", ports.Metrics, "port of the operator's /metrics on 127.0.0.1 (0: a free port)")
	fs.IntVar(&ports.Probes, "probe-port", ports.Probes, "port of the operator's /healthz and /readyz on 127.0.0.1 (0: a free port)")
	fs.IntVar(&ports.Gateway, "gateway-port", ports.Gateway, "port of the forward-proxy gateway on 127.0.0.1 (0: a free port)")
	fs.IntVar(&ports.Origin, "origin-port", ports.Origin, "port of the local origin HTTP server on 127.0.0.1 (0: a free port)")
	freePorts := fs.Bool("free-ports", false, "pick a free port for every server (overrides the port flags)")
	gcpEndpoint := fs.String("gcp-endpoint", "", "Compute Engine endpoint for the gcp provider instead of the local fake (whatever natIP it reports must be reachable)")
	gcpProject := fs.String("gcp-project", devenv.DefaultGCPProject, "Compute Engine project of the gcp provider")
	operators := fs.Int("operators", 1, "operator processes to run; more than one elect a leader behind the same addresses (pid files .dev/operator-<i>.pid)")
	controllerManager := fs.Bool("controller-manager", false, "also run kube-controller-manager (Deployments, ReplicaSets, disruption budgets, EndpointSlices, ServiceAccounts), a few seconds more at start")
	operatorBinary := fs.String("operator-binary", "", "the operator binary (make dev builds bin/proxy-operator); empty: built into .dev/bin")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bin/dev [flags] [-- operator flags]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *freePorts {
		ports = devenv.Ports{}
	}
	if *operators < 1 {
		return fmt.Errorf("-operators %d: want at least 1", *operators)
	}

	// If whatever started us (make, go run) dies, get SIGTERM and tear down
	// rather than keep etcd, kube-apiserver and squids running as orphans.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("setting parent-death signal: %w", errno)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	devDir := filepath.Join(root, devDirName)
	if err := os.MkdirAll(devDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", devDir, err)
	}
	unlock, err := lock(filepath.Join(devDir, lockFile))
	if err != nil {
		return err
	}
	defer unlock()

	// dev's own client-go and controller-runtime logs go to a file: the
	// terminal stays for progress. Each operator process logs to its own.
	logger, err := devenv.FileLogger(filepath.Join(devDir, devenv.LogsDir, "dev.log"))
	if err != nil {
		return err
	}
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	begin := time.Now()
	env, err := devenv.Start(ctx, devenv.Options{
		Dir: devDir, Ports: ports, Progress: os.Stdout,
		Operators: *operators, OperatorBinary: *operatorBinary, ControllerManager: *controllerManager,
		GCPEndpoint: *gcpEndpoint, GCPProject: *gcpProject,
		// Everything after "--" goes to the operator unchanged.
		OperatorArgs: fs.Args(),
	})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Ctrl-C while starting: torn down, not a failure.
			fmt.Println("dev: interrupted; stopped")
			return nil
		}
		return err
	}
	printBanner(root, env, time.Since(begin))

	select {
	case <-ctx.Done():
	case name := <-env.Failed():
		err = fmt.Errorf("%s stopped unexpectedly (logs in %s)", name, rel(root, filepath.Join(devDir, devenv.LogsDir)))
	}
	// After the first signal a second one kills dev at once; the kernel
	// then kills the children (Pdeathsig).
	stopSignals()
	fmt.Println("dev: tearing down")
	tctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	stopBegin := time.Now()
	if serr := env.Stop(tctx); serr != nil {
		return errors.Join(err, serr)
	}
	if left := devenv.ProcessesUsing(env.ProcessDirs()...); len(left) > 0 {
		return errors.Join(err, fmt.Errorf("processes left behind: %s", strings.Join(left, ", ")))
	}
	fmt.Printf("dev: stopped in %s; no processes left\n", time.Since(stopBegin).Round(100*time.Millisecond))
	return err
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

func printBanner(root string, e *devenv.Env, took time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nproxy-operator dev environment is up (%s); the sample fleet is Ready.\n\n", took.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "Kubernetes (%s):\n", e.ControlPlane.Host)
	fmt.Fprintf(&b, "  export KUBECONFIG=$PWD/%s\n", rel(root, e.KubeconfigPath))
	b.WriteString("  bin/kubectl get proxies -o wide\n")
	b.WriteString("  echo '{\"apiVersion\":\"leasing.crawl.example.com/v1alpha1\",\"kind\":\"ProxyLease\",\"metadata\":{\"generateName\":\"crawler-\"},\"spec\":{\"selector\":{\"tier\":\"premium\"},\"target\":\"origin\",\"ttlSeconds\":300}}' | bin/kubectl create -f -\n")
	b.WriteString("  bin/kubectl get proxyleases\n\n")
	tokenPath := rel(root, filepath.Join(e.Dir, devenv.DiscoveryTokenFile))
	urlPath := rel(root, filepath.Join(e.Dir, devenv.DiscoveryURLFile))
	fmt.Fprintf(&b, "HTTP discovery API (%s, docs/api.md):\n", e.DiscoveryURL)
	fmt.Fprintf(&b, "  TOKEN=$(cat %s) URL=$(cat %s)\n", tokenPath, urlPath)
	fmt.Fprintf(&b, "  export CURL_CA_BUNDLE=$PWD/%s    # the operator's CA: HTTPS, verified\n", rel(root, e.CAPath))
	b.WriteString("  curl -s -H \"Authorization: Bearer $TOKEN\" $URL/v1/proxies\n")
	b.WriteString("  curl -s -H \"Authorization: Bearer $TOKEN\" -d '{\"selector\":{\"tier\":\"standard\"},\"target\":\"origin\",\"ttlSeconds\":300}' $URL/v1/leases\n")
	fmt.Fprintf(&b, "  curl -x <proxy from the lease> %s/    # the local origin, through squid\n", e.OriginURL)
	b.WriteString("  curl -s -X DELETE -H \"Authorization: Bearer $TOKEN\" $URL/v1/leases/<leaseID>\n\n")
	fmt.Fprintf(&b, "Gateway (%s, docs/gateway.md): any HTTP client, the token as the password:\n", e.GatewayURL)
	fmt.Fprintf(&b, "  curl -x http://x:$TOKEN@%s %s/    # rotates: a lease per request\n", strings.TrimPrefix(e.GatewayURL, "http://"), e.OriginURL)
	fmt.Fprintf(&b, "  curl -x http://session-s1:$TOKEN@%s %s/    # sticky: one proxy for session s1\n\n", strings.TrimPrefix(e.GatewayURL, "http://"), e.OriginURL)
	fmt.Fprintf(&b, "Metrics:    %s\n", e.MetricsURL)
	fmt.Fprintf(&b, "Probes:     %s/healthz, %s/readyz\n", e.HealthProbeURL, e.HealthProbeURL)
	fmt.Fprintf(&b, "ProxyLease: https://127.0.0.1:%d (through kube-apiserver: APIService %s)\n", e.APIServerPort, devenv.APIServiceName)
	fmt.Fprintf(&b, "Origin:     %s (target of the fleet's health checks)\n", e.OriginURL)
	gce := "the local fake, a squid per VM; log " + rel(root, e.LogPath("gce.log"))
	if e.GCE == nil {
		gce = "given with -gcp-endpoint"
	}
	fmt.Fprintf(&b, "GCE:        %s, project %s (%s)\n", e.GCPEndpoint, e.GCPProject, gce)
	for _, o := range e.Operators {
		fmt.Fprintf(&b, "Operator:   %s, pid in %s (restarted when it exits), log %s\n", o.Name, rel(root, o.PIDFile), rel(root, o.LogPath))
	}
	fmt.Fprintf(&b, "Logs:       %s, %s, %s\n", rel(root, e.LogPath("nodeagent.log")), rel(root, e.LogPath("dev.log")),
		rel(root, e.ControlPlane.APIServerLogPath))
	b.WriteString("Press Ctrl-C to stop and tear everything down.\n")
	fmt.Print(b.String())
}

// lock takes an exclusive lock so two `make dev` never share .dev/.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another `make dev` is running in this checkout (lock %s)", path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
