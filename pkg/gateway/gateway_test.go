package gateway

import (
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/httpdrain/httpdraintest"
)

// TestServeStopsWithSilentConnection: a client's spare connection to the
// gateway (dialed, nothing sent) does not hold Serve's return, and so the
// replica's shutdown and a handover, for net/http's 5 s; the gateway closes
// it. (pkg/httpdrain's negative control shows net/http alone waits.)
func TestServeStopsWithSilentConnection(t *testing.T) {
	g, err := New(DefaultOptions(), Deps{Leaser: newFakeLeaser(time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	httpdraintest.ServeStopsWithSilentConnection(t, g.Serve, nil)
}
