package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// KeepLogsEnv, set to anything, keeps a package's log directory after a run
// that passed (one that failed always keeps it).
const KeepLogsEnv = "E2E_KEEP_LOGS"

// Env is a test package's environment: what its TestMain starts before the
// package's tests and stops after them. Main runs it. The setup function
// starts the parts; each part registers its stop (Defer, in reverse order of
// registration, as t.Cleanup does) and the logs to show when a test fails
// (ShowLog). Every test package under test/ runs in one, so they all stop
// whatever started, in order, even after a failed start; print the same
// log tails on a failure; keep the logs of a failed run; and fail when a
// squid outlives the package.
type Env struct {
	// Name is the package's; it prefixes Main's messages and the log
	// directory's name.
	Name string
	// LogDir is a directory of the package's own for its processes' logs:
	// removed after a run that passed, kept and named after one that failed
	// (or with KeepLogsEnv set).
	LogDir string

	stops  []deferred
	logs   []shownLog
	shared []*controlplane.Shared
	out    io.Writer
}

type deferred struct {
	what string
	stop func() error
}

type shownLog struct {
	path  string
	lines int
}

// Tests is what Main runs: a *testing.M.
type Tests interface{ Run() int }

// Main runs a package's tests in an Env named name and returns the exit
// code: setup starts the environment (on an error the tests do not run and
// the code is 1), the tests run, then everything setup registered stops,
// however far it got. A stop that fails, or a squid process of this
// process's left behind, fails the package too. On a failure the tails of
// the registered logs go to stderr.
func Main(m Tests, name string, setup func(context.Context, *Env) error) int {
	return run(m, name, setup, os.Stderr)
}

func run(m Tests, name string, setup func(context.Context, *Env) error, out io.Writer) int {
	dir, err := os.MkdirTemp("", "proxy-operator-"+name+"-")
	if err != nil {
		fmt.Fprintf(out, "%s: creating the log directory: %v\n", name, err)
		return 1
	}
	e := &Env{Name: name, LogDir: dir, out: out}
	code := 0
	if err := setup(context.Background(), e); err != nil {
		fmt.Fprintf(out, "%s: starting the environment: %v\n", name, err)
		code = 1
	} else {
		code = m.Run()
	}
	if err := e.stop(); err != nil {
		fmt.Fprintf(out, "%s: stopping the environment: %v\n", name, err)
		code = max(code, 1)
	}
	// Every squid a test started was a child of this process (or of a node
	// agent running in it): none may outlive the package.
	if left := SquidChildren(); len(left) > 0 {
		fmt.Fprintf(out, "%s: squid processes left behind: %v\n", name, left)
		code = max(code, 1)
	}
	if code != 0 {
		e.showLogs()
	}
	if code != 0 || os.Getenv(KeepLogsEnv) != "" {
		fmt.Fprintf(out, "%s: logs kept in %s\n", name, dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	return code
}

// Defer registers stop, named what in its error, to run when the package's
// tests end (or its setup fails): the last registered runs first.
func (e *Env) Defer(what string, stop func() error) {
	e.stops = append(e.stops, deferred{what: what, stop: stop})
}

// ShowLog registers a log whose last lines are printed when the package
// fails: path is absolute or relative to LogDir.
func (e *Env) ShowLog(path string, lines int) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(e.LogDir, path)
	}
	e.logs = append(e.logs, shownLog{path: path, lines: lines})
}

// Logger is a JSON logger writing to name in LogDir, whose last 80 lines are
// shown on a failure (the logger of an in-process operator or node agent).
func (e *Env) Logger(name string) (logr.Logger, error) {
	l, err := FileLogger(filepath.Join(e.LogDir, name))
	if err != nil {
		return logr.Logger{}, err
	}
	e.ShowLog(name, 80)
	return l, nil
}

// ControlPlane starts a control plane for the package, stopped after its
// tests; etcd's and kube-apiserver's logs are shown on a failure.
func (e *Env) ControlPlane(ctx context.Context, opts controlplane.Options) (*controlplane.ControlPlane, error) {
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	e.Defer("control plane", cp.Stop)
	e.ShowLog(cp.EtcdLogPath, 30)
	e.ShowLog(cp.APIServerLogPath, 60)
	return cp, nil
}

// Share registers a control plane the package's tests start on first use
// (controlplane.Shared): stopped after them if one started, its logs shown
// on a failure.
func (e *Env) Share(s *controlplane.Shared) {
	e.Defer("shared control plane", s.Stop)
	e.shared = append(e.shared, s)
}

// Client is an uncached client of the control plane as cluster-admin.
func Client(cp *controlplane.ControlPlane, scheme *runtime.Scheme) (client.Client, error) {
	c, err := client.New(cp.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the admin client: %w", err)
	}
	return c, nil
}

// Go runs f (a node agent, an in-process operator, …) on its own context
// until the package's tests end; with ready non-nil it first waits for ready
// to close (RunUntilStopped). A part that fails to start is still stopped.
func (e *Env) Go(ctx context.Context, what string, f func(context.Context) error, ready <-chan struct{}) error {
	stop, err := RunUntilStopped(ctx, f, ready)
	e.Defer(what, stop)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (e *Env) stop() error {
	var errs []error
	for i := len(e.stops) - 1; i >= 0; i-- {
		d := e.stops[i]
		if err := d.stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.what, err))
		}
	}
	e.stops = nil
	return errors.Join(errs...)
}

func (e *Env) showLogs() {
	logs := e.logs
	for _, s := range e.shared {
		if cp := s.Started(); cp != nil {
			logs = append(logs, shownLog{cp.EtcdLogPath, 30}, shownLog{cp.APIServerLogPath, 60})
		}
	}
	for _, l := range logs {
		writeTail(e.out, l.path, l.lines)
	}
}
