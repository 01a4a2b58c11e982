package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// DefaultSquidPort is the port squid listens on when the pod names none.
const DefaultSquidPort = 3128

// SquidConfig is what one squid instance needs: where it listens and the
// directory that holds its config, pid file and logs.
type SquidConfig struct {
	// Addr is the loopback address squid binds (127.0.0.N).
	Addr netip.Addr
	// Port is the listening port; 0 means DefaultSquidPort.
	Port int
	// Dir is the instance's own directory. squid runs as SquidUser when the
	// agent is root, so Dir must be writable by that user (0777) and its
	// parents traversable.
	Dir string
	// VisibleHostname appears in squid's error pages; it avoids squid's
	// start-up failure when the machine's hostname does not resolve.
	VisibleHostname string
	// AuthConfig, when set, is the proxy auth helper's configuration
	// (pkg/proxyauth HelperConfig): squid then refuses (407) requests
	// without a lease's credentials, checked by the helper at AuthHelper.
	AuthConfig []byte
	// AuthHelper is the proxy-auth-helper binary (required with AuthConfig).
	AuthHelper string
	// AccessRules, with AuthConfig, are the acl and http_access lines of
	// the squid.conf the operator rendered for the pod (its auth Secret's),
	// which this squid runs as the pod's would: where a lease's requests
	// may go. Empty: proxyauth's default Egress (the public internet only).
	AccessRules string
}

// RelayAddr is where the helper relays the squid's traffic with
// AuthConfig: the squid's own loopback address (each instance has one),
// on proxyauth.DefaultRelayAddr's port unless the squid listens there.
func (c SquidConfig) RelayAddr() string {
	_, port, _ := net.SplitHostPort(proxyauth.DefaultRelayAddr)
	if port == strconv.Itoa(c.port()) {
		port = strconv.Itoa(c.port() + 1)
	}
	return net.JoinHostPort(c.Addr.String(), port)
}

func (c SquidConfig) port() int {
	if c.Port == 0 {
		return DefaultSquidPort
	}
	return c.Port
}

// AuthConfigPath is where StartSquid writes AuthConfig.
func (c SquidConfig) AuthConfigPath() string { return filepath.Join(c.Dir, "proxy-auth.json") }

// ListenAddr returns "Addr:Port".
func (c SquidConfig) ListenAddr() string {
	return net.JoinHostPort(c.Addr.String(), strconv.Itoa(c.port()))
}

// ConfigPath is where StartSquid writes the rendered config.
func (c SquidConfig) ConfigPath() string { return filepath.Join(c.Dir, "squid.conf") }

// PIDPath is squid's pid_filename.
func (c SquidConfig) PIDPath() string { return filepath.Join(c.Dir, "squid.pid") }

// CacheLogPath is squid's cache_log (its diagnostics).
func (c SquidConfig) CacheLogPath() string { return filepath.Join(c.Dir, "cache.log") }

// AccessLogPath is squid's access_log.
func (c SquidConfig) AccessLogPath() string { return filepath.Join(c.Dir, "access.log") }

// OutputPath receives squid's stdout and stderr.
func (c SquidConfig) OutputPath() string { return filepath.Join(c.Dir, "squid.out") }

// Validate reports a config squid could not run with.
func (c SquidConfig) Validate() error {
	switch {
	case !c.Addr.IsValid():
		return errors.New("squid config: addr is required")
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("squid config: port %d out of range", c.Port)
	case c.Dir == "" || !filepath.IsAbs(c.Dir):
		return fmt.Errorf("squid config: dir %q must be an absolute path", c.Dir)
	case strings.ContainsAny(c.Dir, " \t\n\"'"):
		// squid.conf has no quoting for paths.
		return fmt.Errorf("squid config: dir %q must not contain spaces or quotes", c.Dir)
	case strings.ContainsAny(c.VisibleHostname, " \t\n"):
		return fmt.Errorf("squid config: visible hostname %q must not contain whitespace", c.VisibleHostname)
	case len(c.AuthConfig) > 0 && (c.AuthHelper == "" || strings.ContainsAny(c.AuthHelper, " \t\n\"'")):
		return fmt.Errorf("squid config: auth helper %q must be a path without spaces or quotes", c.AuthHelper)
	}
	return nil
}

// RenderSquidConfig returns the squid.conf for c: a forward proxy on
// c.ListenAddr() that caches nothing and keeps every file inside c.Dir, so
// many instances run side by side without sharing state. With c.AuthConfig
// it serves only a lease's credentials (as the operator's pods and VMs do);
// without, anyone (it is reachable on loopback only).
func RenderSquidConfig(c SquidConfig) string {
	host := c.VisibleHostname
	if host == "" {
		host = "proxy-operator-squid"
	}
	access := "http_access allow all"
	if len(c.AuthConfig) > 0 {
		// This squid's auth_param lines (its paths), the pod's rules.
		rules := c.AccessRules
		if rules == "" {
			rules = proxyauth.SquidLeaseRules(proxyauth.Egress{})
		}
		access = strings.TrimSuffix(proxyauth.SquidAuthParams(c.AuthHelper, c.AuthConfigPath(), c.RelayAddr())+rules, "\n")
	}
	lines := []string{
		"# Rendered by the proxy-operator node agent.",
		"http_port " + c.ListenAddr(),
		access,
		"cache deny all",
		"cache_mem 8 MB",
		// A replaced pod must release its address quickly.
		"shutdown_lifetime 1 seconds",
		"pid_filename " + c.PIDPath(),
		// squid 5 needs the stdio: module prefix for file logs.
		"access_log stdio:" + c.AccessLogPath(),
		"cache_log stdio:" + c.CacheLogPath(),
		"cache_store_log none",
		"coredump_dir " + c.Dir,
		// Defaults write under /var/spool/squid and start helpers that
		// every instance would share.
		"netdb_filename none",
		"pinger_enable off",
		"visible_hostname " + host,
	}
	return strings.Join(lines, "\n") + "\n"
}

// Squid is one running squid process. Its methods are safe for concurrent use.
type Squid struct {
	config SquidConfig
	cmd    *exec.Cmd
	out    *os.File
	done   chan struct{}

	mu       sync.Mutex
	exitErr  error
	stopping bool
}

// StartSquid writes c's config into c.Dir and starts `squidPath -N -f conf`
// in the foreground with env as its environment. It returns once the process
// exists; use WaitListening to know when it serves.
func StartSquid(squidPath string, c SquidConfig, env []string) (*Squid, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(c.AuthConfig) > 0 {
		// squid runs the helper as its own user, which must read this.
		if err := os.WriteFile(c.AuthConfigPath(), c.AuthConfig, 0o644); err != nil {
			return nil, fmt.Errorf("writing the proxy auth config: %w", err)
		}
	}
	if err := os.WriteFile(c.ConfigPath(), []byte(RenderSquidConfig(c)), 0o644); err != nil {
		return nil, fmt.Errorf("writing squid config: %w", err)
	}
	out, err := os.OpenFile(c.OutputPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return nil, fmt.Errorf("opening squid output: %w", err)
	}
	cmd := exec.Command(squidPath, "-N", "-f", c.ConfigPath())
	if len(c.AuthConfig) > 0 {
		// Behind the helper's relay, as the operator's pods run it.
		argv := proxyauth.RelayCommand(c.AuthHelper, c.AuthConfigPath(), c.RelayAddr(), squidPath, "-N", "-f", c.ConfigPath())
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	cmd.Dir = c.Dir
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so Stop can kill anything squid forked.
		Setpgid: true,
		// If the agent dies without stopping it (a killed test binary),
		// the kernel kills squid instead of leaving it orphaned.
		Pdeathsig: syscall.SIGKILL,
	}
	// Started as root, squid would switch to its user itself, and that
	// switch clears the parent-death signal. Starting it as that user keeps
	// the signal armed (Go sets it after the credentials).
	if cred, err := squidCredential(); err != nil {
		_ = out.Close()
		return nil, err
	} else if cred != nil {
		cmd.SysProcAttr.Credential = cred
	}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("starting %s: %w", squidPath, err)
	}
	s := &Squid{config: c, cmd: cmd, out: out, done: make(chan struct{})}
	go s.wait()
	return s, nil
}

func (s *Squid) wait() {
	err := s.cmd.Wait()
	_ = s.out.Close()
	s.mu.Lock()
	s.exitErr = err
	s.mu.Unlock()
	close(s.done)
}

// Config returns the config the instance runs with.
func (s *Squid) Config() SquidConfig { return s.config }

// PID returns the process id.
func (s *Squid) PID() int { return s.cmd.Process.Pid }

// Done is closed when the process has exited.
func (s *Squid) Done() <-chan struct{} { return s.done }

// Exited reports whether the process has exited.
func (s *Squid) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// ExitError is the error of the process's exit (nil for exit status 0);
// meaningful once Done is closed.
func (s *Squid) ExitError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitErr
}

// ExitCode is the exit status, 128+signal when a signal killed it, or -1
// while it runs.
func (s *Squid) ExitCode() int {
	if !s.Exited() {
		return -1
	}
	ps := s.cmd.ProcessState
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Stopping reports whether Stop was called, i.e. whether an exit was asked for
// rather than a crash.
func (s *Squid) Stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Stop asks squid to shut down (SIGTERM), waits up to grace, then kills its
// whole process group, and returns once the process has exited. Calling it
// again, or after a crash, is harmless.
func (s *Squid) Stop(grace time.Duration) error {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	if s.Exited() {
		return nil
	}
	pid := s.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending SIGTERM to squid %d: %w", pid, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C:
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing squid process group %d: %w", pid, err)
		}
		<-s.done
	}
	return nil
}

// Kill kills the process with SIGKILL without marking it as stopping, so the
// exit looks like a crash. For tests.
func (s *Squid) Kill() error {
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing squid %d: %w", s.PID(), err)
	}
	return nil
}

// SquidUser is the account squid runs as when the agent runs as root
// (Debian's squid package creates it).
const SquidUser = "proxy"

// squidCredential returns the credential to start squid with: SquidUser's
// when running as root, nil (inherit) otherwise.
func squidCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(SquidUser)
	if err != nil {
		return nil, fmt.Errorf("looking up squid's user %q: %w", SquidUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of %q: %w", SquidUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of %q: %w", SquidUser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// WaitListening polls addr with TCP connects until one succeeds, done is
// closed (the process exited: an error) or ctx ends.
func WaitListening(ctx context.Context, addr string, done <-chan struct{}) error {
	const interval = 50 * time.Millisecond
	d := net.Dialer{Timeout: time.Second}
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("squid exited before listening on %s", addr)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to listen: %w", addr, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// PortFree reports whether nothing listens on addr, by binding it briefly. An
// address another process serves (a squid of an earlier run, another agent) is
// not free.
func PortFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// LookSquid finds the squid binary: path if given, else squid on $PATH, else
// /usr/sbin/squid (Debian's location, often not on a non-root PATH).
func LookSquid(path string) (string, error) {
	if path != "" {
		return exec.LookPath(path)
	}
	if p, err := exec.LookPath("squid"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/squid"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("squid not found: install it with `apt-get install squid`")
}
