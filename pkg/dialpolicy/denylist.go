package dialpolicy

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

// Denylist is what the operator may not connect to for a tenant.
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

// Empty reports whether d denies nothing.
func (d Denylist) Empty() bool { return len(d.Prefixes) == 0 && len(d.Endpoints) == 0 }

// AddServer denies the address of a server the operator talks to, as a
// URL (the API server's rest.Config Host: "https://10.96.0.1:443"), every
// address its host name resolves to, on its port.
func (d *Denylist) AddServer(ctx context.Context, server string) error {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return fmt.Errorf("server %q is not a URL", server)
	}
	p, err := URLPort(u, "https")
	if err != nil {
		return fmt.Errorf("server %q: %w", server, err)
	}
	addrs, err := Lookup(ctx, u.Hostname())
	if err != nil {
		return fmt.Errorf("resolving server %q: %w", server, err)
	}
	for _, a := range addrs {
		d.Endpoints = append(d.Endpoints, netip.AddrPortFrom(a, p))
	}
	return nil
}

// URLPort is u's port, or its scheme's (def's when the scheme is neither
// http nor https).
func URLPort(u *url.URL, def string) (uint16, error) {
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

// Lookup is host's addresses (itself when it is one).
func Lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// DeniedError is a connection the Denylist refused before it was made.
type DeniedError struct{ Addr string }

func (e *DeniedError) Error() string { return e.Addr + " is denied" }

// IsDenied reports whether err is (or wraps) a refused dial, and its
// address.
func IsDenied(err error) (addr string, ok bool) {
	var de *DeniedError
	if errors.As(err, &de) {
		return de.Addr, true
	}
	return "", false
}

// Control is a net.Dialer Control that refuses a denied address: it sees
// the address after resolution, so a name cannot hide one.
func (d Denylist) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	if d.Denies(ap) {
		return &DeniedError{Addr: address}
	}
	return nil
}
