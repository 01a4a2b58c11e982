package sitebench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// squid is one Squid of a benchmark's fleet: its visible hostname (the
// Via an origin sees) and its proxy attributes.
type squid struct {
	name  string
	attrs map[string]string
}

// startFleet starts squids on addrs' loopback range as proxies of one lease
// store (opts) behind the HTTP lease API: the store and the API's URL.
func startFleet(b *testing.B, addrs [2]string, opts leasing.Options, squids []squid) (*lease.Store, string) {
	b.Helper()
	log.SetLogger(logr.Discard())
	pool, err := nodeagent.NewAddrPool(netip.MustParseAddr(addrs[0]), netip.MustParseAddr(addrs[1]))
	if err != nil {
		b.Fatal(err)
	}
	store, err := lease.New(opts.StoreOptions(), clock.RealClock{})
	if err != nil {
		b.Fatal(err)
	}
	for _, sq := range squids {
		framework.LeaseSquid(store, "bench", framework.StartSquid(b, pool, sq.name), sq.attrs)
	}
	return store, framework.StartLeaseAPI(b, store, opts, token).URL
}

// serveSite serves h on a fresh port of host (a loopback address of its own,
// so that no cooldown of one crawl reaches the next): the page URL, and
// stop.
func serveSite(b *testing.B, host string, h http.Handler) (pageURL string, stop func()) {
	b.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/page", func() { _ = srv.Close() }
}

// fetch gets a page never asked for before (no Squid answers from its
// cache) through l's proxy: its status, or the transport's error.
func fetch(l *wire.Lease, pageURL string) (int, error) {
	proxyURL, err := url.Parse(l.Proxy.URL)
	if err != nil {
		return 0, err
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}}
	resp, err := hc.Get(fmt.Sprintf("%s?n=%d", pageURL, pages.Add(1)))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// endLease reports result for site on l (none when ""), then releases it.
func endLease(c *client.Client, l *wire.Lease, result, site string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if result != "" {
		_ = c.Report(ctx, l.LeaseID, result, site)
	}
	_ = c.Release(ctx, l.LeaseID)
}
