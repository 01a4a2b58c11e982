package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

// process is one child binary running in its own process group.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

// startProcess runs bin with args; its stdout and stderr go to logPath and,
// when out is non-nil, also to out with every line prefixed by the name.
func startProcess(name, bin string, args []string, logPath string, out io.Writer) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log for %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = nil
	if out == nil {
		cmd.Stdout, cmd.Stderr = logFile, logFile
	} else {
		// One comparable writer for both streams: exec then serialises Writes.
		w := &prefixWriter{prefix: "[" + name + "] ", out: io.MultiWriter(logFile, out)}
		cmd.Stdout, cmd.Stderr = w, w
		// Don't let a stray holder of the pipe block Wait forever.
		cmd.WaitDelay = 2 * time.Second
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: Stop signals the whole group.
		Setpgid: true,
		// If the test binary (or `make dev`) dies without running Stop, the
		// kernel kills the child instead of leaving it orphaned.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes an early exit, or nil while the process runs.
func (p *process) exitError() error {
	if !p.exited() {
		return nil
	}
	if p.waitErr != nil {
		return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
	}
	return fmt.Errorf("%s exited with status 0", p.name)
}

// stop sends SIGTERM to the process group, then SIGKILL after grace, and
// waits until the process is reaped. An exit caused by our signal is not an
// error.
func (p *process) stop(grace time.Duration) error {
	defer p.logFile.Close()
	if p.exited() {
		return nil
	}
	pgid := p.pid() // Setpgid makes the pid the group id
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
	}
}

// tail returns up to the last n lines of the process log.
func (p *process) tail(n int) string {
	return logtail.File(p.logPath, n)
}

// prefixWriter prefixes each complete line; exec guarantees one writer at a
// time, the mutex guards against other uses.
type prefixWriter struct {
	mu      sync.Mutex
	prefix  string
	out     io.Writer
	partial []byte
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := make([]byte, 0, len(w.prefix)+i+1)
		line = append(line, w.prefix...)
		line = append(line, w.partial[:i+1]...)
		if _, err := w.out.Write(line); err != nil {
			return len(b), err
		}
		w.partial = w.partial[i+1:]
	}
	return len(b), nil
}

// startError is returned when a child fails to come up; it names the process
// and carries the tail of its log.
type startError struct {
	process string
	err     error
	logTail string
}

func (e *startError) Error() string {
	return fmt.Sprintf("%s failed to start: %v\n--- last lines of %s log ---\n%s", e.process, e.err, e.process, e.logTail)
}

func (e *startError) Unwrap() error { return e.err }

// flagArgs renders a flag map as sorted --key=value arguments so command
// lines are stable and easy to read in logs.
func flagArgs(flags map[string]string) []string {
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([]string, 0, len(keys))
	for _, k := range keys {
		args = append(args, "--"+strings.TrimLeft(k, "-")+"="+flags[k])
	}
	return args
}

// processAlive reports whether pid exists and is not a zombie (an orphan
// may stay a zombie for a while where PID 1 is slow to reap).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no procfs: trust kill(0)
	}
	// Format: "pid (comm) state ..."; comm may contain spaces or ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}
