package framework

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/proxy-operator/proxy-operator/test/logtail"
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
		if path := filepath.Join(dir, name); fileExists(path) {
			writeTail(w, path, n)
		}
	}
}

// writeTail writes the last n lines of the log at path under a header
// naming it (Env's failure output and DumpLogTails alike).
func writeTail(w io.Writer, path string, n int) {
	fmt.Fprintf(w, "--- last lines of %s ---\n%s\n", path, strings.TrimRight(logtail.File(path, n), "\n"))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// SquidChildren lists the squid processes whose parent is this process (a
// node agent or test running in it started them), as "pid:state": squid
// itself, or the relay that runs a squid checking credentials
// (proxy-auth-helper relay, whose child it is). A test binary checks it is
// empty before exiting: nothing may outlive the tests.
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
		// The kernel keeps 15 bytes of a process's name.
		if name := s[open+1 : close]; len(fields) < 2 || (name != "squid" && name != "proxy-auth-helper"[:15]) {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == me {
			out = append(out, fmt.Sprintf("%d:%s", pid, fields[0]))
		}
	}
	return out
}

// ScrapyPython is Debian's interpreter, which python3-scrapy installs into
// (a python3 earlier on PATH, e.g. pyenv's, has no Scrapy).
func ScrapyPython(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import scrapy").Run() == nil {
			return path
		}
	}
	t.Fatal("no python3 with Scrapy: run `make python` (apt-get install python3-scrapy)")
	return ""
}
