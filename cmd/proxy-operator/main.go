package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/pkg/version"
)

func main() {
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("proxy-operator", pflag.ContinueOnError)
	opts.AddFlags(fs)
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println(version.Get())
		return
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	logger := zap.New(zap.UseFlagOptions(&opts.Zap))
	ctrl.SetLogger(logger)
	// One logging setup: the aggregated API server (k8s.io/apiserver) and
	// client-go log through klog; send that to the same logger.
	klog.SetLogger(logger)

	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "loading kubeconfig: %v\n", err)
		os.Exit(1)
	}
	ctrl.Log.Info("starting", "version", version.Get().String())
	ctx := ctrl.SetupSignalHandler()
	if err := app.Run(ctx, cfg, opts); err != nil {
		ctrl.Log.Error(err, "proxy-operator failed")
		os.Exit(1)
	}
}
