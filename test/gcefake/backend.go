package gcefake

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// Backend serves the proxy of an instance. Start runs when an instance is
// inserted, with the instance's metadata items (key to value), and returns the address ("ip:port") the proxy listens on once it
// does, and a function that stops it; the instance turns RUNNING with that
// IP as its natIP only after Start returned. An error makes the instance
// TERMINATED.
type Backend interface {
	Start(ctx context.Context, instance string, metadata map[string]string) (addr string, stop func() error, err error)
}

// NoBackend serves nothing: each instance gets a distinct address in
// 127.0.2.0/24 that nothing listens on. Enough for provider contract tests.
type NoBackend struct {
	mu sync.Mutex
	n  int
}

// Start implements Backend.
func (b *NoBackend) Start(context.Context, string, map[string]string) (string, func() error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	return fmt.Sprintf("127.0.2.%d:3128", 2+b.n%250), nil, nil
}

// SquidBackend runs Debian's squid for each instance on its own loopback
// address from a pool (default 127.0.3.2–127.0.3.254, disjoint from the node
// agent's), in a directory of its own that also receives the user-data. An
// instance whose metadata has the proxy auth configuration
// (gcp.MetadataProxyAuth) checks credentials, as the documented cloud-init
// makes a VM do.
type SquidBackend struct {
	squidPath string
	// authHelper is the helper copied into baseDir ("": authHelperErr).
	authHelper    string
	authHelperErr error
	pool          *nodeagent.AddrPool
	baseDir       string
	ownsDir       bool
	grace         time.Duration
}

// SquidOptions configure NewSquidBackend.
type SquidOptions struct {
	// PoolFirst..PoolLast are the squids' addresses (default 127.0.3.2–127.0.3.254).
	PoolFirst, PoolLast netip.Addr
	// BaseDir holds one directory per instance (default: a new temporary
	// directory, removed by Close).
	BaseDir string
	// SquidPath is the squid binary (default: found as the node agent does).
	SquidPath string
	// AuthHelper is the proxy-auth-helper binary (default: found as the
	// node agent does).
	AuthHelper string
}

// NewSquidBackend checks that squid exists and prepares the base directory.
func NewSquidBackend(o SquidOptions) (*SquidBackend, error) {
	path, err := nodeagent.LookSquid(o.SquidPath)
	if err != nil {
		return nil, err
	}
	if !o.PoolFirst.IsValid() {
		o.PoolFirst = netip.MustParseAddr("127.0.3.2")
	}
	if !o.PoolLast.IsValid() {
		o.PoolLast = netip.MustParseAddr("127.0.3.254")
	}
	pool, err := nodeagent.NewAddrPool(o.PoolFirst, o.PoolLast)
	if err != nil {
		return nil, err
	}
	b := &SquidBackend{squidPath: path, pool: pool, baseDir: o.BaseDir, grace: 2 * time.Second}
	if b.baseDir == "" {
		if b.baseDir, err = os.MkdirTemp("", "gcefake-"); err != nil {
			return nil, err
		}
		b.ownsDir = true
	}
	if err := os.MkdirAll(b.baseDir, 0o755); err != nil {
		return nil, err
	}
	// squid runs as its own user: the tree must be traversable.
	if err := os.Chmod(b.baseDir, 0o755); err != nil {
		return nil, err
	}
	if src, err := nodeagent.LookAuthHelper(o.AuthHelper); err != nil {
		b.authHelperErr = err
	} else if b.authHelper, err = nodeagent.InstallAuthHelper(src, b.baseDir); err != nil {
		b.authHelperErr = err
	}
	return b, nil
}

// BaseDir is where instance directories go (a process still naming it after
// Close was left behind).
func (b *SquidBackend) BaseDir() string { return b.baseDir }

// Close removes the base directory if the backend made it. Stop the server
// (which stops every squid) first.
func (b *SquidBackend) Close() error {
	if b.ownsDir {
		return os.RemoveAll(b.baseDir)
	}
	return nil
}

// Start implements Backend.
func (b *SquidBackend) Start(ctx context.Context, instance string, metadata map[string]string) (string, func() error, error) {
	auth := metadata[gcp.MetadataProxyAuth]
	if auth != "" && b.authHelper == "" {
		return "", nil, fmt.Errorf("the instance checks proxy credentials, and the backend has no auth helper: %w", b.authHelperErr)
	}
	addr, err := b.pool.Allocate(func(a netip.Addr) bool {
		return !nodeagent.PortFree(netip.AddrPortFrom(a, nodeagent.DefaultSquidPort).String())
	})
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(b.baseDir, strings.NewReplacer("/", "_").Replace(instance)+"-"+randomHex(6))
	if err := os.MkdirAll(dir, 0o777); err != nil {
		b.pool.Release(addr)
		return "", nil, err
	}
	_ = os.Chmod(dir, 0o777)
	if userData := metadata[gcp.MetadataUserData]; userData != "" {
		_ = os.WriteFile(filepath.Join(dir, "user-data"), []byte(userData), 0o644)
	}
	// The VM's name in squid's Via header, as a pod's name is for the
	// node agent's squids: origins can tell the proxies apart.
	cfg := nodeagent.SquidConfig{Addr: addr, Dir: dir, VisibleHostname: instance[strings.LastIndex(instance, "/")+1:]}
	if auth != "" {
		// A VM runs its cloud-init's squid.conf: the example's rules,
		// widened for the tests' origins on loopback (any port), as
		// --proxy-allowed-cidrs and --proxy-allowed-ports widen a pod's;
		// its helper's relay the same.
		hc, err := proxyauth.ParseHelperConfig([]byte(auth))
		if err != nil {
			b.pool.Release(addr)
			return "", nil, fmt.Errorf("the VM's proxy auth metadata: %w", err)
		}
		hc.Egress = vmEgress()
		cfg.AuthConfig, cfg.AuthHelper = hc.Marshal(), b.authHelper
		cfg.AccessRules = proxyauth.SquidLeaseRules(vmEgress())
	}
	sq, err := nodeagent.StartSquid(b.squidPath, cfg, os.Environ())
	if err != nil {
		b.pool.Release(addr)
		return "", nil, err
	}
	stop := func() error {
		err := sq.Stop(b.grace)
		b.pool.Release(addr)
		_ = os.RemoveAll(dir)
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := nodeagent.WaitListening(wctx, cfg.ListenAddr(), sq.Done()); err != nil {
		_ = stop()
		return "", nil, err
	}
	return cfg.ListenAddr(), stop, nil
}

// vmEgress is where the fake's VMs take a lease's requests.
func vmEgress() proxyauth.Egress {
	return proxyauth.Egress{
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		AllowedPorts: []proxyauth.PortRange{{From: 1, To: 65535}},
	}
}
