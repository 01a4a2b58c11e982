package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
)

// DefaultDeniedCIDRs is the default of --health-denied-cidrs: link-local,
// where clouds serve instance metadata (and its credentials) at
// 169.254.169.254.
func DefaultDeniedCIDRs() []string { return []string{"169.254.0.0/16", "fe80::/10"} }

// Denylist is what a probe may not connect to, nor ask a proxy to fetch:
// whoever may create a Proxy chooses its endpoint and its health check URL,
// and the probe would otherwise reach, with the operator's network position,
// addresses that tenant cannot (instance metadata, the API server), and its
// expectedStatus would tell them what answered there.
type Denylist struct {
	// Prefixes are denied whole (--health-denied-cidrs).
	Prefixes []netip.Prefix
	// Endpoints are denied on one port only: the API server's address is
	// often one that proxies share (a loopback address in make dev).
	Endpoints []netip.AddrPort
}

// Denies reports whether ap may not be reached.
func (d Denylist) Denies(ap netip.AddrPort) bool {
	addr := ap.Addr().Unmap()
	for _, p := range d.Prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	for _, e := range d.Endpoints {
		if e.Addr().Unmap() == addr && e.Port() == ap.Port() {
			return true
		}
	}
	return false
}

// AddServer denies the address of a server the operator talks to, as a
// URL (the API server's rest.Config Host: "https://10.96.0.1:443"), every
// address its host name resolves to, on its port.
func (d *Denylist) AddServer(ctx context.Context, server string) error {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return fmt.Errorf("server %q is not a URL", server)
	}
	p, err := urlPort(u, "https")
	if err != nil {
		return fmt.Errorf("server %q: %w", server, err)
	}
	addrs, err := lookup(ctx, u.Hostname())
	if err != nil {
		return fmt.Errorf("resolving server %q: %w", server, err)
	}
	for _, a := range addrs {
		d.Endpoints = append(d.Endpoints, netip.AddrPortFrom(a, p))
	}
	return nil
}

// urlPort is u's port, or its scheme's (def when the scheme is neither
// http nor https).
func urlPort(u *url.URL, def string) (uint16, error) {
	port := u.Port()
	if port == "" {
		scheme := u.Scheme
		if scheme != "http" && scheme != "https" {
			scheme = def
		}
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q: %w", port, err)
	}
	return uint16(p), nil
}

// lookup is host's addresses (itself when it is one).
func lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// errDenied is a connection the Denylist refused, before it was made.
type errDenied struct{ addr string }

func (e *errDenied) Error() string { return e.addr + " is denied" }

// control is a net.Dialer Control that refuses a denied address: it sees
// the address after resolution, so a name cannot hide one.
func (d Denylist) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	if d.Denies(ap) {
		return &errDenied{addr: address}
	}
	return nil
}

// deniedProxy is the ErrInvalidTarget of a probe whose proxy's address
// was denied (err is the transport's), or nil for any other error.
func deniedProxy(err error) error {
	var de *errDenied
	if !errors.As(err, &de) {
		return nil
	}
	return fmt.Errorf("%w: the proxy's address %s is in a network probes may not reach (--health-denied-cidrs)", ErrInvalidTarget, de.addr)
}

// checkURLHost refuses a health check URL whose host is, or resolves to, a
// denied address. The proxy resolves the name again when it fetches the
// URL, so a name whose answer changes between the two can still reach a
// denied address through a proxy: the NetworkPolicy of the proxies is what
// holds there.
func (d Denylist) checkURLHost(ctx context.Context, target *url.URL) error {
	if len(d.Prefixes) == 0 && len(d.Endpoints) == 0 {
		return nil
	}
	p, err := urlPort(target, "http")
	if err != nil {
		return fmt.Errorf("%w: health check URL: %w", ErrInvalidTarget, err)
	}
	addrs, err := lookup(ctx, target.Hostname())
	if err != nil {
		// Unresolvable here; the proxy may resolve it (a name only its
		// network knows): the probe goes ahead and the proxy answers.
		return nil
	}
	for _, a := range addrs {
		if d.Denies(netip.AddrPortFrom(a, p)) {
			return fmt.Errorf("%w: the health check URL's host %s (%s) is in a network probes may not reach (--health-denied-cidrs)",
				ErrInvalidTarget, target.Hostname(), a)
		}
	}
	return nil
}
