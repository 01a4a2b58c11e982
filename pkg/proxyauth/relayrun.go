package proxyauth

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// RunRelay is the relay program: it reads the helper configuration at
// configPath (polling its live list as the helper does), listens on
// listenAddr, and relays until ctx ends. With a command (Squid's), it starts
// it once it listens — so that Squid's first probe of its parent finds it —
// passes it SIGTERM, SIGINT and SIGHUP, and returns when the command exits,
// with its error; the command dies with the relay (parent-death signal).
func RunRelay(ctx context.Context, configPath, listenAddr string, command []string, logf func(string, ...any)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	cfg, v, err := startVerifier(ctx, configPath, &wg, logf)
	if err != nil {
		return err
	}
	r := NewRelay(v, cfg.Egress, nil)
	ln, err := r.Listen(ctx, listenAddr, logf)
	if err != nil {
		return err
	}
	wg.Go(func() { r.Run(ctx) })
	served := make(chan error, 1)
	wg.Go(func() { served <- r.Serve(ctx, ln) })
	if len(command) == 0 {
		<-ctx.Done()
		return <-served
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", command[0], err)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	done := ctx.Done()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-done:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done = nil // once
		case err := <-exited:
			cancel()
			if serr := <-served; serr != nil {
				logf("proxy-auth-helper: %v", serr)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", command[0], err)
			}
			return nil
		}
	}
}
