package crash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/artifacts/crds"
	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/gcefake"
)

const project = "crash-project"

// shared is the environment of every run in the package; set by TestMain.
var shared *environment

type environment struct {
	cp       *controlplane.ControlPlane
	client   client.Client
	fake     *gcefake.Server
	endpoint string
	// binary is the operator, built from this tree by TestMain.
	binary string
	dir    string
}

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	env, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "crash: starting: %v\n", err)
		if env != nil {
			_ = env.stop()
		}
		return 1
	}
	shared = env
	code := m.Run()
	if err := env.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "crash: stopping: %v\n", err)
		code = 1
	}
	if code == 0 && os.Getenv("E2E_KEEP_LOGS") == "" {
		_ = os.RemoveAll(env.dir)
	} else {
		fmt.Fprintf(os.Stderr, "crash: operator logs kept in %s\n", env.dir)
	}
	return code
}

func start() (*environment, error) {
	dir, err := os.MkdirTemp("", "proxy-operator-crash-")
	if err != nil {
		return nil, err
	}
	env := &environment{dir: dir}
	if env.binary, err = framework.OperatorBinary(dir); err != nil {
		return env, err
	}
	ctx := context.Background()
	if env.cp, err = controlplane.Start(ctx, controlplane.Options{CRDFS: crds.FS}); err != nil {
		return env, err
	}
	scheme, err := app.NewScheme()
	if err != nil {
		return env, err
	}
	if env.client, err = client.New(env.cp.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		return env, err
	}
	// Pages of 8: listings span several pages, each of which can fail.
	env.fake = gcefake.New(gcefake.Options{PageSize: 8})
	env.endpoint, err = env.fake.Start("127.0.0.1:0")
	return env, err
}

func (e *environment) stop() error {
	var errs []error
	if e.fake != nil {
		errs = append(errs, e.fake.Close())
	}
	if e.cp != nil {
		errs = append(errs, e.cp.Stop())
	}
	return errors.Join(errs...)
}
