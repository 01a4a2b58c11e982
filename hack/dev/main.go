package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/artifacts/examples"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// Layout of .dev/, the contract with tests and scripts.
const (
	devDirName     = ".dev"
	kubeconfigFile = "kubeconfig"
	readyFile      = "ready"
	lockFile       = "dev.lock"
	controlDirName = "controlplane"
)

// teardownTimeout bounds stopping all components; each child process gets a
// SIGKILL after its own grace period well before this.
const teardownTimeout = 60 * time.Second

// env is what components share: paths, and what earlier components made
// available to later ones.
type env struct {
	root   string // repository root
	devDir string // <root>/.dev
	// cp is set by the control plane component.
	cp *controlplane.ControlPlane
}

func (e *env) path(parts ...string) string {
	return filepath.Join(append([]string{e.devDir}, parts...)...)
}

// component is one piece of the dev environment.
type component interface {
	// name is shown in progress messages.
	name() string
	// start brings the component up and returns once it is usable; it may
	// rely on everything earlier components put into env. If it fails it
	// must leave nothing running.
	start(ctx context.Context, e *env) error
	// stop tears the component down. Called once, in reverse start order,
	// only for components whose start succeeded.
	stop(ctx context.Context) error
}

// watched components can fail while running; dev then shuts down.
type watched interface {
	// done is closed when the component stopped working on its own.
	done() <-chan struct{}
}

func components() []component {
	return []component{
		&controlPlaneComponent{},
		&examplesComponent{},
		// Later: the operator (cmd/proxy-operator in-process or as a child),
		// the node agent, the fake GCE endpoint.
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "dev: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	// If whatever started us (make, go run) dies, get SIGTERM and tear down
	// rather than keep etcd and kube-apiserver running as orphans.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("setting parent-death signal: %w", errno)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	e := &env{root: root, devDir: filepath.Join(root, devDirName)}
	if err := os.MkdirAll(e.devDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", e.devDir, err)
	}
	unlock, err := lock(e.path(lockFile))
	if err != nil {
		return err
	}
	defer unlock()
	// A previous run killed with SIGKILL may have left a stale ready file.
	_ = os.Remove(e.path(readyFile))

	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	var started []component
	teardown := func() error {
		// After the first signal a second one kills dev at once; the kernel
		// then kills the children (Pdeathsig).
		stopSignals()
		_ = os.Remove(e.path(readyFile))
		fmt.Println("dev: tearing down")
		tctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer cancel()
		var errs []error
		for i := len(started) - 1; i >= 0; i-- {
			c := started[i]
			if err := c.stop(tctx); err != nil {
				errs = append(errs, fmt.Errorf("stopping %s: %w", c.name(), err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		fmt.Println("dev: stopped")
		return nil
	}

	begin := time.Now()
	for _, c := range components() {
		fmt.Printf("dev: starting %s\n", c.name())
		if err := c.start(ctx, e); err != nil {
			if ctx.Err() != nil { // Ctrl-C while starting: not a failure
				fmt.Printf("dev: interrupted while starting %s\n", c.name())
				return teardown()
			}
			return errors.Join(fmt.Errorf("starting %s: %w", c.name(), err), teardown())
		}
		started = append(started, c)
	}
	if err := os.WriteFile(e.path(readyFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return errors.Join(fmt.Errorf("writing ready file: %w", err), teardown())
	}
	printBanner(e, time.Since(begin))

	failed := make(chan string, len(started))
	for _, c := range started {
		if w, ok := c.(watched); ok {
			go func() {
				select {
				case <-w.done():
					failed <- c.name()
				case <-ctx.Done():
				}
			}()
		}
	}
	select {
	case <-ctx.Done():
		return teardown()
	case name := <-failed:
		return errors.Join(fmt.Errorf("%s stopped unexpectedly", name), teardown())
	}
}

func printBanner(e *env, took time.Duration) {
	rel := func(p string) string {
		if r, err := filepath.Rel(e.root, p); err == nil {
			return r
		}
		return p
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nproxy-operator dev environment is up (%s).\n\n", took.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "  export KUBECONFIG=$PWD/%s\n", rel(e.path(kubeconfigFile)))
	b.WriteString("  bin/kubectl get proxies\n\n")
	fmt.Fprintf(&b, "API server: %s\n", e.cp.Host)
	fmt.Fprintf(&b, "Logs:       %s, %s\n", rel(e.cp.APIServerLogPath), rel(e.cp.EtcdLogPath))
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

// controlPlaneComponent runs etcd + kube-apiserver with the CRDs installed
// and publishes .dev/kubeconfig.
type controlPlaneComponent struct {
	cp         *controlplane.ControlPlane
	kubeconfig string
}

func (c *controlPlaneComponent) name() string { return "control plane (etcd, kube-apiserver)" }

func (c *controlPlaneComponent) start(ctx context.Context, e *env) error {
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: e.path(controlDirName)})
	if err != nil {
		return err
	}
	data, err := os.ReadFile(cp.KubeconfigPath)
	if err == nil {
		// Write then rename: a reader never sees half a kubeconfig.
		tmp := e.path(kubeconfigFile + ".tmp")
		if err = os.WriteFile(tmp, data, 0o600); err == nil {
			err = os.Rename(tmp, e.path(kubeconfigFile))
		}
	}
	if err != nil {
		return errors.Join(fmt.Errorf("publishing kubeconfig: %w", err), cp.Stop())
	}
	c.cp, c.kubeconfig, e.cp = cp, e.path(kubeconfigFile), cp
	return nil
}

func (c *controlPlaneComponent) stop(context.Context) error {
	_ = os.Remove(c.kubeconfig)
	return c.cp.Stop()
}

func (c *controlPlaneComponent) done() <-chan struct{} { return c.cp.Done() }

// examplesComponent applies the sample fleet (artifacts/examples/fleet,
// embedded as examples.Fleet).
type examplesComponent struct{}

func (examplesComponent) name() string { return "sample fleet (artifacts/examples/fleet)" }

func (examplesComponent) start(ctx context.Context, e *env) error {
	applied, err := controlplane.ApplyFS(ctx, e.cp.RESTConfig(), examples.Fleet)
	for _, ref := range applied {
		fmt.Printf("dev:   applied %s\n", ref)
	}
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		return errors.New("artifacts/examples/fleet holds no manifests")
	}
	return nil
}

// The objects go away with the control plane.
func (examplesComponent) stop(context.Context) error { return nil }
