package crash

import (
	"context"
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

func TestMain(m *testing.M) { os.Exit(framework.Main(m, "crash", start)) }

// start brings up the package's control plane and the Compute Engine fake;
// each run starts (and kills) its own operator processes, logging into the
// Env's log directory.
func start(ctx context.Context, fw *framework.Env) error {
	env := &environment{dir: fw.LogDir}
	shared = env
	var err error
	if env.binary, err = framework.OperatorBinary(fw.LogDir); err != nil {
		return err
	}
	if env.cp, err = fw.ControlPlane(ctx, controlplane.Options{CRDFS: crds.FS}); err != nil {
		return err
	}
	scheme, err := app.NewScheme()
	if err != nil {
		return err
	}
	if env.client, err = framework.Client(env.cp, scheme); err != nil {
		return err
	}
	// Pages of 8: listings span several pages, each of which can fail.
	env.fake = gcefake.New(gcefake.Options{PageSize: 8})
	if env.endpoint, err = env.fake.Start("127.0.0.1:0"); err != nil {
		return err
	}
	fw.Defer("compute engine fake", env.fake.Close)
	return nil
}
