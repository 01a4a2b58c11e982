package devenv

import (
	"context"
	"errors"
	"fmt"

	"github.com/proxy-operator/proxy-operator/test/gcefake"
)

// DefaultGCPProject is the project of the fake Compute Engine in `make dev`.
const DefaultGCPProject = "proxy-operator-dev"

// gceComponent runs the Compute Engine fake with a Squid behind every RUNNING
// VM, unless Options.GCPEndpoint names another endpoint (then it only
// records that endpoint for the operator).
type gceComponent struct {
	fake   *gcefake.Server
	squids *gcefake.SquidBackend
}

func (c *gceComponent) name() string {
	return "Compute Engine fake (squid per VM)"
}

func (c *gceComponent) start(_ context.Context, e *Env) error {
	e.GCPProject = e.opts.GCPProject
	if e.GCPProject == "" {
		e.GCPProject = DefaultGCPProject
	}
	if e.opts.GCPEndpoint != "" {
		e.GCPEndpoint = e.opts.GCPEndpoint
		e.progressf("  using the Compute Engine endpoint %s (project %s); no fake started", e.GCPEndpoint, e.GCPProject)
		return nil
	}
	// A temporary directory, as the node agent's: squid runs as its own
	// user and must traverse every parent.
	squids, err := gcefake.NewSquidBackend(gcefake.SquidOptions{
		PoolFirst: e.opts.GCEPoolFirst,
		PoolLast:  e.opts.GCEPoolLast,
	})
	if err != nil {
		return fmt.Errorf("squid backend: %w", err)
	}
	logger, err := FileLogger(e.LogPath("gce.log"))
	if err != nil {
		return err
	}
	fake := gcefake.New(gcefake.Options{Backend: squids, Log: logger})
	url, err := fake.Start("127.0.0.1:0")
	if err != nil {
		return errors.Join(err, squids.Close())
	}
	c.fake, c.squids = fake, squids
	e.GCPEndpoint, e.GCE, e.gceDir = url, fake, squids.BaseDir()
	return nil
}

func (c *gceComponent) stop(context.Context) error {
	if c.fake == nil {
		return nil
	}
	return errors.Join(c.fake.Close(), c.squids.Close())
}
