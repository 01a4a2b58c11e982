package crash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/artifacts/crds"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/gcefake"
)

const project = "crash-project"

// shared is the environment of every run in the package; set by TestMain.
var shared *environment

type environment struct {
	cp       *controlplane.ControlPlane
	client   client.Client
	fake     *gcefake.Server
	endpoint string
	// binary is the operator, built from this tree by TestMain.
	binary string
	dir    string
}

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	env, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "crash: starting: %v\n", err)
		if env != nil {
			_ = env.stop()
		}
		return 1
	}
	shared = env
	code := m.Run()
	if err := env.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "crash: stopping: %v\n", err)
		code = 1
	}
	if code == 0 && os.Getenv("E2E_KEEP_LOGS") == "" {
		_ = os.RemoveAll(env.dir)
	} else {
		fmt.Fprintf(os.Stderr, "crash: operator logs kept in %s\n", env.dir)
	}
	return code
}

func start() (*environment, error) {
	dir, err := os.MkdirTemp("", "proxy-operator-crash-")
	if err != nil {
		return nil, err
	}
	env := &environment{dir: dir, binary: filepath.Join(dir, "proxy-operator")}
	if err := buildOperator(env.binary); err != nil {
		return env, err
	}
	ctx := context.Background()
	if env.cp, err = controlplane.Start(ctx, controlplane.Options{CRDFS: crds.FS}); err != nil {
		return env, err
	}
	scheme, err := app.NewScheme()
	if err != nil {
		return env, err
	}
	if env.client, err = client.New(env.cp.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		return env, err
	}
	// Pages of 8: listings span several pages, each of which can fail.
	env.fake = gcefake.New(gcefake.Options{PageSize: 8})
	env.endpoint, err = env.fake.Start("127.0.0.1:0")
	return env, err
}

// buildOperator builds cmd/proxy-operator to path: the crash test needs the
// operator as its own process, to kill it as the kernel would.
func buildOperator(path string) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "build", "-o", path, "./cmd/proxy-operator")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the operator: %v\n%s", err, out)
	}
	return nil
}

func (e *environment) stop() error {
	var errs []error
	if e.fake != nil {
		errs = append(errs, e.fake.Close())
	}
	if e.cp != nil {
		errs = append(errs, e.cp.Stop())
	}
	return errors.Join(errs...)
}

// operator is one operator process.
type operator struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startOperator runs the binary with args, its output appended to logPath.
// It dies with the test process (Pdeathsig), so a crashed test leaves none.
func startOperator(binary, logPath string, args []string) (*operator, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting the operator: %w", err)
	}
	o := &operator{cmd: cmd, done: make(chan struct{})}
	go func() {
		o.err = cmd.Wait()
		_ = f.Close()
		close(o.done)
	}()
	return o, nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (o *operator) kill() {
	_ = o.cmd.Process.Signal(syscall.SIGKILL)
	<-o.done
}

// stop sends SIGTERM and waits, then SIGKILL after grace.
func (o *operator) stop(grace time.Duration) error {
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.done:
		return nil
	case <-time.After(grace):
		o.kill()
		return fmt.Errorf("operator did not stop within %s of SIGTERM", grace)
	}
}

// exited reports whether the process ended by itself.
func (o *operator) exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}
