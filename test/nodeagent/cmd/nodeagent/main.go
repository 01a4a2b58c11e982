package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/stdr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		kubeconfig = os.Getenv("KUBECONFIG")
		opts       nodeagent.Options
		first      = nodeagent.DefaultPoolFirst.String()
		last       = nodeagent.DefaultPoolLast.String()
		verbosity  int
	)
	fs := pflag.NewFlagSet("nodeagent", pflag.ContinueOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", kubeconfig, "Path of the kubeconfig (default $KUBECONFIG).")
	fs.StringVar(&opts.NodeName, "node-name", nodeagent.DefaultNodeName, "Node to register; pods with this spec.nodeName are run.")
	fs.StringVar(&opts.Tag, "tag", provider.DefaultTag, "Run only pods labelled "+provider.TagLabel+"=<tag>.")
	fs.StringVar(&opts.SquidPath, "squid", "", "squid binary (default: squid on PATH, else /usr/sbin/squid).")
	fs.StringVar(&opts.AuthHelper, "auth-helper", "", "proxy-auth-helper binary, for pods that check proxy credentials (default: on PATH, else the module's bin/, built if missing).")
	fs.StringVar(&opts.BaseDir, "base-dir", "", "Directory for per-pod squid files (default: a temporary directory).")
	fs.BoolVar(&opts.Bind, "bind", false, "Bind unscheduled tagged pods to this node.")
	fs.StringVar(&first, "pool-first", first, "First loopback address for squids.")
	fs.StringVar(&last, "pool-last", last, "Last loopback address for squids.")
	fs.IntVarP(&verbosity, "v", "v", 0, "Log verbosity.")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			return nil
		}
		return err
	}
	var err error
	if opts.PoolFirst, err = netip.ParseAddr(first); err != nil {
		return fmt.Errorf("--pool-first: %w", err)
	}
	if opts.PoolLast, err = netip.ParseAddr(last); err != nil {
		return fmt.Errorf("--pool-last: %w", err)
	}
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig or $KUBECONFIG is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	stdr.SetVerbosity(verbosity)
	opts.Log = stdr.New(log.New(os.Stderr, "", log.LstdFlags))

	agent, err := nodeagent.New(cfg, opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return agent.Run(ctx)
}
