package crawleee2e

import (
	"context"
	"os"
	"testing"

	"github.com/proxy-operator/proxy-operator/test/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, "crawlee", func(context.Context, *framework.Env) error { return nil }))
}
