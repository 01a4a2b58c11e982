// Command proxy-auth-helper is Squid's basic-auth helper for proxies the
// operator runs: it accepts a lease's credentials (and the operator's health
// probes) and nothing else. Squid starts it from the stanza
// proxyauth.SquidAuthConfig renders.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		relay(os.Args[2:])
		return
	}
	config := flag.String("config", "", "the helper configuration (JSON, written by the operator)")
	installTo := flag.String("install-to", "", "copy this binary into the directory and exit (a Squid pod's init container)")
	flag.Parse()
	if *installTo != "" {
		if err := proxyauth.InstallSelf(*installTo); err != nil {
			fmt.Fprintf(os.Stderr, "proxy-auth-helper: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *config == "" {
		fmt.Fprintln(os.Stderr, "proxy-auth-helper: --config is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Squid keeps the helper's stderr in its cache.log.
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	if err := proxyauth.RunHelper(ctx, *config, os.Stdin, os.Stdout, logf); err != nil {
		logf("proxy-auth-helper: %v", err)
		os.Exit(1)
	}
}

// relay runs the relay Squid sends its traffic through, and Squid itself
// when a command follows "--": proxy-auth-helper relay --config FILE
// --listen ADDR [-- squid ARGS...].
func relay(args []string) {
	fs := flag.NewFlagSet("relay", flag.ExitOnError)
	config := fs.String("config", "", "the helper configuration (JSON, written by the operator)")
	listen := fs.String("listen", proxyauth.DefaultRelayAddr, "the loopback address Squid's cache_peer names")
	_ = fs.Parse(args)
	if *config == "" {
		fmt.Fprintln(os.Stderr, "proxy-auth-helper relay: --config is required")
		os.Exit(2)
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx := context.Background()
	command := fs.Args()
	if len(command) == 0 {
		// Alone (a VM's own unit): until stopped.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
	}
	err := proxyauth.RunRelay(ctx, *config, *listen, command, logf)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		// Squid's own exit status, as if it ran alone.
		os.Exit(ee.ExitCode())
	case err != nil:
		logf("proxy-auth-helper relay: %v", err)
		os.Exit(1)
	}
}
