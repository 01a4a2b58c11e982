package framework

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// FileLogger logs JSON lines at info level to path (creating its directory),
// so an in-process operator's log can be shown when a test fails without
// flooding the test output when it passes.
func FileLogger(path string) (logr.Logger, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return logr.Logger{}, fmt.Errorf("creating log directory: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return logr.Logger{}, fmt.Errorf("creating log file: %w", err)
	}
	return zap.New(zap.WriteTo(f), zap.UseDevMode(false), zap.Level(zapcore.InfoLevel),
		func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder }), nil
}

// DumpLogTails writes the last n lines of each named file of dir to w,
// skipping files that do not exist.
func DumpLogTails(w io.Writer, dir string, n int, names ...string) {
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(w, "--- last lines of %s ---\n%s\n", name, strings.Join(lines, "\n"))
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a component that takes an address rather than a listener. A test that
// needs several ports takes them from one FreePorts call.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n different TCP ports on 127.0.0.1, none of them in
// taken (ports picked earlier and not bound yet), that were free a moment
// ago: a PortReservation released on return. Another process can still take
// one before its user binds it.
func FreePorts(n int, taken ...int) ([]int, error) {
	var r PortReservation
	defer r.Release()
	ports := make([]int, 0, n)
	// Every pick differs from those held, so at most len(taken) are skipped.
	for len(ports) < n {
		p, err := r.Reserve(0)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(taken, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// PortReservation holds TCP ports on 127.0.0.1 for processes that bind them
// a moment later. Every port stays bound until Release, so the ports of one
// reservation are different (picking a free port, closing it and picking
// again can return the same port).
type PortReservation struct{ held []net.Listener }

// Reserve binds port, or a free port when port is 0, until Release, and
// returns it.
func (r *PortReservation) Reserve(port int) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("listening on 127.0.0.1:%d (choose another port, or 0 for a free one): %w", port, err)
	}
	r.held = append(r.held, ln)
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Release unbinds every reserved port; it may be called more than once.
func (r *PortReservation) Release() {
	for _, ln := range r.held {
		_ = ln.Close()
	}
	r.held = nil
}

// SquidChildren lists the squid processes whose parent is this process (a
// node agent or test running in it started them), as "pid:state". A test
// binary checks it is empty before exiting: nothing may outlive the tests.
func SquidChildren() []string {
	entries, _ := os.ReadDir("/proc")
	me := os.Getpid()
	var out []string
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if len(fields) < 2 || s[open+1:close] != "squid" {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == me {
			out = append(out, fmt.Sprintf("%d:%s", pid, fields[0]))
		}
	}
	return out
}
