package devenvtest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/proxy-operator/proxy-operator/test/devenv"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

// startTimeout bounds the start, the sample fleet's readiness included.
const startTimeout = 5 * time.Minute

// Start starts the dev environment with opts in a new directory of t
// (opts.Dir is set), logging as hack/dev does (one logger for the operator
// library, controller-runtime and klog, into <dir>/logs/dev.log), and stops
// it when t ends.
func Start(t *testing.T, opts devenv.Options) *devenv.Env {
	t.Helper()
	opts.Dir = t.TempDir()
	logs := filepath.Join(opts.Dir, devenv.LogsDir)
	logger, err := devenv.FileLogger(filepath.Join(logs, "dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	env, err := devenv.Start(ctx, opts)
	if err != nil {
		framework.DumpLogTails(os.Stderr, logs, 60, logNames(opts.Operators)...)
		t.Fatalf("starting the dev environment: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(context.Background()); err != nil {
			t.Errorf("stopping the dev environment: %v", err)
		}
		if t.Failed() {
			framework.DumpLogTails(os.Stderr, logs, 60, logNames(opts.Operators)...)
		}
	})
	return env
}

// logNames are the logs worth a look when a test failed (devenv.LogsDir).
func logNames(operators int) []string {
	names := []string{"operator.log"}
	for i := range operators {
		names = append(names, "operator-"+strconv.Itoa(i)+".log")
	}
	return append(names, "dev.log")
}
