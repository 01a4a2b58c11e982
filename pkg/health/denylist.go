package health

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"

	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
)

// DefaultDeniedCIDRs is the default of --health-denied-cidrs (the dial
// policy's).
func DefaultDeniedCIDRs() []string { return dialpolicy.DefaultDeniedCIDRs() }

// deniedProxy is the ErrInvalidTarget of a probe whose proxy's address
// was denied (err is the transport's), or nil for any other error.
func deniedProxy(err error) error {
	addr, ok := dialpolicy.IsDenied(err)
	if !ok {
		return nil
	}
	return fmt.Errorf("%w: the proxy's address %s is in a network probes may not reach (--health-denied-cidrs)", ErrInvalidTarget, addr)
}

// checkURLHost refuses a health check URL whose host is, or resolves to, a
// denied address. The proxy resolves the name again when it fetches the
// URL, so a name whose answer changes between the two can still reach a
// denied address through a proxy: the proxies' own rules (they reach the
// public internet only) and their NetworkPolicy are what hold there.
func checkURLHost(ctx context.Context, d dialpolicy.Denylist, target *url.URL) error {
	if d.Empty() {
		return nil
	}
	p, err := dialpolicy.URLPort(target, "http")
	if err != nil {
		return fmt.Errorf("%w: health check URL: %w", ErrInvalidTarget, err)
	}
	addrs, err := dialpolicy.Lookup(ctx, target.Hostname())
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
