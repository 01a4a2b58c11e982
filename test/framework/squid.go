package framework

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// StartSquid runs Debian's squid on a free address of pool (first..last,
// the calling package's own loopback range), as the node agent does for the
// operator's pods, waits until it listens, and stops it when the test ends.
// hostname is its visible_hostname (Via), "" for squid's default.
func StartSquid(tb testing.TB, pool *nodeagent.AddrPool, hostname string) *nodeagent.Squid {
	tb.Helper()
	path, err := nodeagent.LookSquid("")
	if err != nil {
		tb.Fatalf("%v (this test forwards through a real squid)", err)
	}
	addr, err := pool.Allocate(func(a netip.Addr) bool {
		return !nodeagent.PortFree(net.JoinHostPort(a.String(), strconv.Itoa(nodeagent.DefaultSquidPort)))
	})
	if err != nil {
		tb.Fatal(err)
	}
	// squid runs as its own user: its directory must be writable by it and
	// its parents traversable, which t.TempDir (0700) is not.
	dir, err := os.MkdirTemp("", "e2e-squid-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		tb.Fatal(err)
	}
	cfg := nodeagent.SquidConfig{Addr: addr, Dir: dir, VisibleHostname: hostname}
	sq, err := nodeagent.StartSquid(path, cfg, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := sq.Stop(5 * time.Second); err != nil {
			tb.Logf("stopping squid: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := nodeagent.WaitListening(ctx, cfg.ListenAddr(), sq.Done()); err != nil {
		out, _ := os.ReadFile(cfg.CacheLogPath())
		tb.Fatalf("%v\n%s", err, out)
	}
	return sq
}
