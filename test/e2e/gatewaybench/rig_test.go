package gatewaybench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/gateway"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// squidAddrs is this package's loopback range for its Squids.
var squidAddrs = [2]string{"127.0.14.2", "127.0.14.40"}

const benchToken = "gateway-bench-token"

// rig is squids, the lease API over them, and gateways in front.
type rig struct {
	// squids are the proxies' host:port.
	squids []string
	// squidPIDs are their processes, for their CPU time.
	squidPIDs []int
	// gateway is the URL, with the client's credentials, of a gateway on
	// the replica that serves leases (it leases in process); gatewayAPI of
	// one on another replica (it leases through the lease API).
	gateway, gatewayAPI *url.URL
	// hop is a bare TCP relay in front of the first Squid (no CONNECT of
	// its own, no lease): what an extra hop costs before any gateway work.
	hop *url.URL
}

// startRig starts n squids, a lease store where each takes perProxy leases,
// the HTTP lease API over it, a gateway leasing in process (as on the
// replica that serves leases) and one leasing through that API (as on any
// other), and a bare TCP hop in front of the first Squid.
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
		r.squids, r.squidPIDs = append(r.squids, sq.Config().ListenAddr()), append(r.squidPIDs, sq.PID())
		framework.LeaseSquid(store, "bench", sq, nil)
	}
	api := framework.StartLeaseAPI(b, store, leasing.DefaultOptions(), benchToken)

	// The replica that serves leases calls its lease API in process; any
	// other replica's gateway leases through the API (plain HTTP here).
	o := gateway.DefaultOptions()
	o.Addr, o.LeaseAPIURL = "127.0.0.1:0", api.URL
	// One token from one address holds every tunnel of the benchmark.
	o.MaxInFlightPerToken, o.MaxInFlightPerSession, o.MaxUnauthenticatedPerSource = o.MaxInFlight, o.MaxInFlight, o.MaxInFlight
	leader, err := o.Leaser(nil, &gateway.LocalAPI{Leaser: api.Server.InProcess(), Serving: api.Leasing.Ready})
	if err != nil {
		b.Fatal(err)
	}
	standby, err := o.Leaser(nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	r.gateway = startGateway(ctx, b, o, leader)
	r.gatewayAPI = startGateway(ctx, b, o, standby)
	r.hop = startHop(ctx, b, r.squids[0])
	return r
}

// startGateway serves a gateway of o leasing through leaser until the
// benchmark ends.
func startGateway(ctx context.Context, b *testing.B, o gateway.Options, leaser gateway.Leaser) *url.URL {
	b.Helper()
	g, err := gateway.New(o, gateway.Deps{Leaser: leaser})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ctx, ln) }()
	b.Cleanup(func() { cancel(); <-done })
	return &url.URL{Scheme: "http", User: url.UserPassword("bench", benchToken), Host: ln.Addr().String()}
}

// startHop relays every connection to upstream, bytes both ways, until the
// benchmark ends.
func startHop(ctx context.Context, b *testing.B, upstream string) *url.URL {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				nodeagent.Relay(ctx, c, up)
			}()
		}
	}()
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}
