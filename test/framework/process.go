package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// OperatorBinaryEnv names a built cmd/proxy-operator for every test to run:
// `make test-integration` builds bin/proxy-operator once and sets it, so the
// packages that run the operator as a process share one build per run.
const OperatorBinaryEnv = "PROXY_OPERATOR_BINARY"

// OperatorBinary is the operator binary tests run as its own process (to kill
// or restart it as a kubelet would): $PROXY_OPERATOR_BINARY when set, else a
// build of cmd/proxy-operator into dir (a plain `go test` never runs a stale
// bin/).
func OperatorBinary(dir string) (string, error) {
	if p := os.Getenv(OperatorBinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", OperatorBinaryEnv, err)
		}
		return p, nil
	}
	path := filepath.Join(dir, "proxy-operator")
	return path, buildOperator(path)
}

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

// OperatorProcess is one operator process.
type OperatorProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartOperatorProcess runs binary with args, its output appended to
// logPath. It dies with the test process (Pdeathsig), so a crashed test
// leaves none.
func StartOperatorProcess(binary, logPath string, args []string) (*OperatorProcess, error) {
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
	o := &OperatorProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		o.err = cmd.Wait()
		_ = f.Close()
		close(o.done)
	}()
	return o, nil
}

// Pid is the process's ID (to read its memory from /proc).
func (o *OperatorProcess) Pid() int { return o.cmd.Process.Pid }

// Done is closed when the process has exited.
func (o *OperatorProcess) Done() <-chan struct{} { return o.done }

// Err is how the process exited (valid after Done).
func (o *OperatorProcess) Err() error { return o.err }

// Kill sends SIGKILL and waits for the process to be gone.
func (o *OperatorProcess) Kill() {
	_ = o.cmd.Process.Signal(syscall.SIGKILL)
	<-o.done
}

// Stop sends SIGTERM and waits, then SIGKILL after grace.
func (o *OperatorProcess) Stop(grace time.Duration) error {
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.done:
		return nil
	case <-time.After(grace):
		o.Kill()
		return fmt.Errorf("operator did not stop within %s of SIGTERM", grace)
	}
}

// Exited reports whether the process has ended.
func (o *OperatorProcess) Exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}
