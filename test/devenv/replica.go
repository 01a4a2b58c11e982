package devenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Restart backoff of an operator process, as a kubelet's (shorter).
const (
	restartBackoffMin = time.Second
	restartBackoffMax = 10 * time.Second
	// restartBackoffReset: a process that ran this long restarts at once.
	restartBackoffReset = 30 * time.Second
	// operatorStopGrace is how long a SIGTERM'ed operator may take (its last
	// lease checkpoint included) before SIGKILL.
	operatorStopGrace = 60 * time.Second
)

// replica is one operator process, restarted whenever it exits until stop.
type replica struct {
	name, binary, pidFile, logPath string
	args                           []string
	ports                          Ports
	progress                       func(format string, args ...any)

	ready    atomic.Bool // its /readyz answers 200: it serves leases (probed every 200ms)
	healthy  atomic.Bool // its /readyz?exclude=leases answers 200: the pod's readiness probe
	alive    atomic.Bool // a process runs
	stopping chan struct{}
	loopDone chan struct{}
	stopOnce sync.Once

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// start launches the first process (an exec failure is returned) and
// then keeps one running.
func (r *replica) start() error {
	r.stopping, r.loopDone = make(chan struct{}), make(chan struct{})
	if err := r.launch(); err != nil {
		close(r.loopDone)
		return err
	}
	go r.supervise()
	go r.probe()
	return nil
}

func (r *replica) launch() error {
	f, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s: %w", r.logPath, err)
	}
	cmd := exec.Command(r.binary, r.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// If dev dies, its operators die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("starting %s: %w", r.binary, err)
	}
	exited := make(chan struct{})
	r.mu.Lock()
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()
	r.alive.Store(true)
	if err := writeFileAtomic(r.pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		r.progress("writing %s: %v", r.pidFile, err)
	}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		r.alive.Store(false)
		r.ready.Store(false)
		close(exited)
	}()
	return nil
}

// supervise restarts the process whenever it exits, with a backoff.
func (r *replica) supervise() {
	defer close(r.loopDone)
	backoff := restartBackoffMin
	for {
		r.mu.Lock()
		cmd, exited := r.cmd, r.exited
		r.mu.Unlock()
		began := time.Now()
		select {
		case <-r.stopping:
			return
		case <-exited:
		}
		if time.Since(began) > restartBackoffReset {
			backoff = restartBackoffMin
		}
		_ = os.Remove(r.pidFile)
		r.progress("%s (pid %d) exited: %v; restarting in %s (log %s)", r.name, cmd.Process.Pid, cmd.ProcessState, backoff, r.logPath)
		select {
		case <-r.stopping:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, restartBackoffMax)
		if err := r.launch(); err != nil {
			r.progress("%s: %v; retrying", r.name, err)
			r.mu.Lock()
			r.exited = closedChan()
			r.mu.Unlock()
		}
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// probe keeps ready current, as a kubelet's readiness probe feeds a
// Service's endpoints.
func (r *replica) probe() {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + hostPort(r.ports.Probes) + "/readyz"
	get := func(url string) bool {
		if !r.alive.Load() {
			return false
		}
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	for {
		select {
		case <-r.stopping:
			return
		case <-time.After(200 * time.Millisecond):
		}
		r.ready.Store(get(url))
		r.healthy.Store(get(url + "?exclude=leases"))
	}
}

// stop ends the restarts, then stops the process: SIGTERM, and SIGKILL
// after operatorStopGrace.
func (r *replica) stop(ctx context.Context) error {
	var err error
	r.stopOnce.Do(func() {
		if r.stopping == nil {
			return
		}
		close(r.stopping)
		<-r.loopDone
		r.mu.Lock()
		cmd, exited := r.cmd, r.exited
		r.mu.Unlock()
		defer func() { _ = os.Remove(r.pidFile) }()
		if cmd == nil || !r.alive.Load() {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(operatorStopGrace)
		defer t.Stop()
		select {
		case <-exited:
			return
		case <-t.C:
		case <-ctx.Done():
		}
		_ = cmd.Process.Kill()
		<-exited
		err = fmt.Errorf("%s did not stop within %s of SIGTERM; killed", r.name, operatorStopGrace)
	})
	return err
}

// service forwards each connection on ln to a replica, as a Kubernetes
// Service does: to one that is ready, else (so that a probe sees the 503)
// to one that runs; a replica that cannot be dialled (it just exited) is
// passed over for the next, as a Service's endpoints drop a terminated pod.
// With none, the connection is closed.
type service struct {
	ln       net.Listener
	replicas []*replica
	portOf   func(Ports) int
	// everyReplica spreads connections over every healthy replica in turn
	// (the gateway) instead of the one that serves leases.
	everyReplica bool
	next         atomic.Uint64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func (s *service) serve() {
	s.conns = map[net.Conn]struct{}{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.forward(c)
			}()
		}
	}()
}

func (s *service) backends() []*replica {
	// The lease APIs go to the replica that serves leases, the gateway to
	// every healthy one, starting one further at each connection.
	start, ok := 0, func(r *replica) bool { return r.ready.Load() }
	if s.everyReplica {
		start, ok = int(s.next.Add(1)), func(r *replica) bool { return r.healthy.Load() }
	}
	var ready, alive []*replica
	for i := range s.replicas {
		r := s.replicas[(start+i)%len(s.replicas)]
		switch {
		case ok(r):
			ready = append(ready, r)
		case r.alive.Load():
			alive = append(alive, r)
		}
	}
	return append(ready, alive...)
}

func (s *service) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.conns == nil {
			return false // closed
		}
		s.conns[c] = struct{}{}
	} else if s.conns != nil {
		delete(s.conns, c)
	}
	return true
}

func (s *service) forward(c net.Conn) {
	defer c.Close()
	var b net.Conn
	for _, r := range s.backends() {
		var err error
		if b, err = net.DialTimeout("tcp", hostPort(s.portOf(r.ports)), 2*time.Second); err == nil {
			break
		}
	}
	if b == nil {
		return
	}
	defer b.Close()
	if !s.track(c, true) || !s.track(b, true) {
		return
	}
	defer s.track(c, false)
	defer s.track(b, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(b, c)
	go pipe(c, b)
	<-done
	<-done
}

// close stops accepting and cuts every forwarded connection.
func (s *service) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}
