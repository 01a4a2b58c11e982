package devenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// runStopTimeout bounds waiting for a long-running component to return.
const runStopTimeout = 60 * time.Second

// controlPlaneComponent runs etcd + kube-apiserver with the CRDs installed
// and publishes <Dir>/kubeconfig.
type controlPlaneComponent struct {
	cp         *controlplane.ControlPlane
	kubeconfig string
}

func (c *controlPlaneComponent) name() string { return "control plane (etcd, kube-apiserver)" }

func (c *controlPlaneComponent) start(ctx context.Context, e *Env) error {
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: e.path(ControlPlaneDir), ControllerManager: e.opts.ControllerManager})
	if err != nil {
		return err
	}
	data, err := os.ReadFile(cp.KubeconfigPath)
	if err == nil {
		err = writeFileAtomic(e.path(KubeconfigFile), data, 0o600)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("publishing kubeconfig: %w", err), cp.Stop())
	}
	c.cp, c.kubeconfig = cp, e.path(KubeconfigFile)
	e.ControlPlane, e.KubeconfigPath = cp, c.kubeconfig
	return nil
}

func (c *controlPlaneComponent) stop(context.Context) error {
	_ = os.Remove(c.kubeconfig)
	return c.cp.Stop()
}

func (c *controlPlaneComponent) done() <-chan struct{} { return c.cp.Done() }

// runner runs a long-running function on its own context (not the start
// context: Ctrl-C must stop components in order, not all at once).
type runner struct {
	cancel context.CancelFunc
	doneCh chan struct{}
	err    error
}

func run(ctx context.Context, f func(context.Context) error) *runner {
	ctx, cancel := context.WithCancel(ctx)
	r := &runner{cancel: cancel, doneCh: make(chan struct{})}
	go func() {
		defer close(r.doneCh)
		r.err = f(ctx)
	}()
	return r
}

func (r *runner) done() <-chan struct{} { return r.doneCh }

// stopAndWait cancels and waits for the function to return.
func (r *runner) stopAndWait(ctx context.Context) error {
	r.cancel()
	t := time.NewTimer(runStopTimeout)
	defer t.Stop()
	select {
	case <-r.doneCh:
		return r.err
	case <-t.C:
		return fmt.Errorf("did not stop within %s", runStopTimeout)
	case <-ctx.Done():
		return fmt.Errorf("did not stop: %w", ctx.Err())
	}
}

// nodeAgentComponent runs the node agent: the kubelet of the operator's pods.
type nodeAgentComponent struct{ *runner }

func (c *nodeAgentComponent) name() string { return "node agent (squid per operator pod)" }

func (c *nodeAgentComponent) start(ctx context.Context, e *Env) error {
	if _, err := nodeagent.LookSquid(""); err != nil {
		return fmt.Errorf("%w (install it with `make squid`)", err)
	}
	logger, err := FileLogger(e.LogPath("nodeagent.log"))
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(e.ControlPlane.RESTConfig(), nodeagent.Options{
		NodeName:  e.opts.NodeName,
		Log:       logger,
		PoolFirst: e.opts.PoolFirst,
		PoolLast:  e.opts.PoolLast,
	})
	if err != nil {
		return err
	}
	c.runner = run(context.Background(), agent.Run)
	t := time.NewTimer(runStopTimeout)
	defer t.Stop()
	select {
	case <-agent.Ready():
		e.Agent = agent
		return nil
	case <-c.doneCh:
		return fmt.Errorf("node agent stopped before it was ready: %v", c.err)
	case <-t.C:
		err = fmt.Errorf("node agent not ready within %s", runStopTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	return errors.Join(err, c.stopAndWait(context.Background()))
}

func (c *nodeAgentComponent) stop(ctx context.Context) error { return c.stopAndWait(ctx) }

// originComponent is a local HTTP origin on 127.0.0.1: health checks and
// curl examples fetch it through the squids. /status/<code> answers that
// status (e.g. /status/429, as a site that rate-limits).
type originComponent struct {
	srv    *http.Server
	doneCh chan struct{}
	hits   atomic.Int64
}

func (c *originComponent) name() string { return "origin HTTP server" }

func (c *originComponent) start(_ context.Context, e *Env) error {
	ln, err := listen(e.opts.Ports.Origin)
	if err != nil {
		return err
	}
	c.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.hits.Add(1)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if s, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
				if code, err := strconv.Atoi(s); err == nil && code >= 200 && code <= 599 {
					w.WriteHeader(code)
				}
			}
			fmt.Fprintf(w, "proxy-operator dev origin: %s %s via=%q\n", r.Method, r.URL.Path, r.Header.Get("Via"))
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	c.doneCh = make(chan struct{})
	go func() {
		defer close(c.doneCh)
		_ = c.srv.Serve(ln)
	}()
	e.OriginURL = "http://" + ln.Addr().String()
	e.origin = c
	return nil
}

func (c *originComponent) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(ctx); err != nil {
		_ = c.srv.Close()
	}
	return nil
}

func (c *originComponent) done() <-chan struct{} { return c.doneCh }

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
