package framework

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// LeaseAPI is the lease path of the replica that serves leases, run in the
// test's process: the wait queue over a store and the HTTP lease API
// (plain HTTP on loopback) with one token.
type LeaseAPI struct {
	Leasing *leasing.Leasing
	Server  *discovery.Server
	// URL is the HTTP API's base URL.
	URL string
}

// StartLeaseAPI runs the queue of opts over store and the HTTP lease API
// answering token until the test ends.
func StartLeaseAPI(tb testing.TB, store *lease.Store, opts leasing.Options, token string) *LeaseAPI {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	l := leasing.NewWithStore(store, opts, clock.RealClock{})
	for _, run := range l.Runnables() {
		go func() { _ = run.Start(ctx) }()
	}
	svc, err := l.Service(leasing.APIHTTP, time.Minute, nil)
	if err != nil {
		tb.Fatal(err)
	}
	api, err := discovery.New(discovery.Options{Tokens: discovery.SingleToken(token), Service: svc})
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	tb.Cleanup(srv.Close)
	return &LeaseAPI{Leasing: l, Server: api, URL: srv.URL}
}

// LeaseSquid makes sq a healthy proxy of store, in namespace ns, named by its
// visible hostname, with attributes attrs (nil: none).
func LeaseSquid(store *lease.Store, ns string, sq *nodeagent.Squid, attrs map[string]string) {
	cfg := sq.Config()
	store.UpsertProxy(lease.ProxyInfo{Namespace: ns, Name: cfg.VisibleHostname, URL: "http://" + cfg.ListenAddr(),
		Host: cfg.Addr.String(), Port: int32(nodeagent.DefaultSquidPort), Attributes: attrs, LatencyMillis: 1, Healthy: true})
}
