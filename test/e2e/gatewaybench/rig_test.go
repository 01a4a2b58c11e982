package gatewaybench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/gateway"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// squidAddrs is this package's loopback range for its Squids.
var squidAddrs = [2]string{"127.0.14.2", "127.0.14.40"}

const benchToken = "gateway-bench-token"

// rig is squids, the lease API over them, and the gateway in front.
type rig struct {
	// squids are the proxies' host:port.
	squids []string
	// squidPIDs are their processes, for their CPU time.
	squidPIDs []int
	// gateway is the gateway's URL with the client's credentials.
	gateway *url.URL
}

// startRig starts n squids, a lease store where each takes perProxy leases,
// the HTTP lease API over it, and the gateway leasing through that API.
func startRig(b *testing.B, n, perProxy int) *rig {
	b.Helper()
	pool, err := nodeagent.NewAddrPool(netip.MustParseAddr(squidAddrs[0]), netip.MustParseAddr(squidAddrs[1]))
	if err != nil {
		b.Fatal(err)
	}
	// The gateway logs through controller-runtime's logger: quiet here.
	log.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	store, err := lease.New(lease.Options{MaxLeasesPerProxy: perProxy, MaxTTL: time.Hour, DefaultTTL: time.Minute, CooldownWindow: time.Minute}, clock.RealClock{})
	if err != nil {
		b.Fatal(err)
	}
	r := &rig{}
	for i := range n {
		sq := framework.StartSquid(b, pool, fmt.Sprintf("gwbench-%d", i))
		cfg := sq.Config()
		r.squids, r.squidPIDs = append(r.squids, cfg.ListenAddr()), append(r.squidPIDs, sq.PID())
		store.UpsertProxy(lease.ProxyInfo{Namespace: "bench", Name: cfg.VisibleHostname, URL: "http://" + cfg.ListenAddr(),
			Host: cfg.Addr.String(), Port: int32(nodeagent.DefaultSquidPort), LatencyMillis: 1, Healthy: true})
	}
	l := leasing.NewWithStore(store, leasing.DefaultOptions(), clock.RealClock{})
	for _, run := range l.Runnables() {
		go func() { _ = run.Start(ctx) }()
	}
	svc, err := l.Service(leasing.APIHTTP, time.Minute, nil)
	if err != nil {
		b.Fatal(err)
	}
	api, err := discovery.New(discovery.Options{Tokens: discovery.SingleToken(benchToken), Service: svc})
	if err != nil {
		b.Fatal(err)
	}
	apiSrv := httptest.NewServer(api.Handler())
	b.Cleanup(apiSrv.Close)

	o := gateway.DefaultOptions()
	o.Addr, o.LeaseAPIURL = "127.0.0.1:0", apiSrv.URL
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	g, err := gateway.New(o, gateway.Deps{Leaser: &gateway.APILeaser{BaseURL: apiSrv.URL, HTTPClient: &http.Client{Transport: t}}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ctx, ln) }()
	b.Cleanup(func() { cancel(); <-done })
	r.gateway = &url.URL{Scheme: "http", User: url.UserPassword("bench", benchToken), Host: ln.Addr().String()}
	return r
}
