package proxyauth

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Egress is where a proxy may take a lease's requests: the public
// internet, on web ports. A crawler fetches whatever URL it is given, so
// without this a lease would be a door into the cluster (the API server,
// the operator's metrics, instance metadata) and into the proxy itself.
// Squid enforces it on the address it connects to: its dst ACL resolves a
// name first, so a name that resolves inside is refused too.
type Egress struct {
	// AllowedCIDRs are internal ranges opened on purpose
	// (--proxy-allowed-cidrs): an intranet crawl, a local origin in tests.
	// They win over BlockedCIDRs and DeniedCIDRs.
	AllowedCIDRs []netip.Prefix `json:"allowedCIDRs,omitempty"`
	// DeniedCIDRs are refused besides BlockedCIDRs (--proxy-denied-cidrs):
	// the cluster's pod and Service ranges where they are not private.
	DeniedCIDRs []netip.Prefix `json:"deniedCIDRs,omitempty"`
	// AllowedPorts widen where a lease's requests may go
	// (--proxy-allowed-ports): CONNECT only to 443 and plain HTTP only to
	// 80 and 443 otherwise.
	AllowedPorts []PortRange `json:"allowedPorts,omitempty"`
}

// BlockedCIDRs are never a proxy's destination unless allowed: this
// network, loopback, link-local (instance metadata), private, shared (CGNAT),
// benchmarking, multicast and reserved ranges, and their IPv6 kin.
func BlockedCIDRs() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "64:ff9b:1::/48", "fc00::/7", "fe80::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// Ports a lease's requests may go to without --proxy-allowed-ports.
var (
	defaultConnectPorts = []PortRange{{443, 443}}
	defaultHTTPPorts    = []PortRange{{80, 80}, {443, 443}}
)

// PortRange is ports From through To.
type PortRange struct{ From, To uint16 }

func (r PortRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(int(r.From))
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// MarshalText writes r as ParsePortRange reads it (the helper's
// configuration carries its proxy's Egress).
func (r PortRange) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (r *PortRange) UnmarshalText(b []byte) error {
	pr, err := ParsePortRange(string(b))
	if err != nil {
		return err
	}
	*r = pr
	return nil
}

// ParsePortRange reads "443" or "8000-8999".
func ParsePortRange(s string) (PortRange, error) {
	from, to, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		to = from
	}
	f, err1 := strconv.ParseUint(from, 10, 16)
	t, err2 := strconv.ParseUint(to, 10, 16)
	if err1 != nil || err2 != nil || f == 0 || t < f {
		return PortRange{}, fmt.Errorf("port range %q: want N or N-M with 1 <= N <= M <= 65535", s)
	}
	return PortRange{uint16(f), uint16(t)}, nil
}

// ParseEgress reads the flags' values: CIDRs and port ranges.
func ParseEgress(allowedCIDRs, deniedCIDRs, allowedPorts []string) (Egress, error) {
	var e Egress
	var errs []error
	for _, s := range allowedCIDRs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			errs = append(errs, fmt.Errorf("--proxy-allowed-cidrs: %w", err))
			continue
		}
		e.AllowedCIDRs = append(e.AllowedCIDRs, p.Masked())
	}
	for _, s := range deniedCIDRs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			errs = append(errs, fmt.Errorf("--proxy-denied-cidrs: %w", err))
			continue
		}
		e.DeniedCIDRs = append(e.DeniedCIDRs, p.Masked())
	}
	for _, s := range allowedPorts {
		r, err := ParsePortRange(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--proxy-allowed-ports: %w", err))
			continue
		}
		e.AllowedPorts = append(e.AllowedPorts, r)
	}
	return e, errors.Join(errs...)
}

// Squid's names for the rules below.
const (
	aclConnect      = "proxy_operator_connect"
	aclConnectPorts = "proxy_operator_connect_ports"
	aclHTTPPorts    = "proxy_operator_http_ports"
	aclAllowed      = "proxy_operator_allowed_dst"
	aclBlocked      = "proxy_operator_blocked_dst"
)

func joinPorts(rs ...[]PortRange) string {
	var parts []string
	for _, r := range rs {
		for _, p := range r {
			parts = append(parts, p.String())
		}
	}
	return strings.Join(parts, " ")
}

func joinPrefixes(ps ...[]netip.Prefix) string {
	var parts []string
	for _, p := range ps {
		for _, x := range p {
			parts = append(parts, x.String())
		}
	}
	return strings.Join(parts, " ")
}

// SquidRules are the squid.conf lines that refuse (403) what a lease may
// not reach: Squid's cache manager for everyone, CONNECT to another port
// than 443 (or --proxy-allowed-ports), plain HTTP to another than 80 and
// 443, and any blocked or denied destination not allowed. Put them after
// authentication and before the line that allows a lease.
func (e Egress) SquidRules() string {
	lines := []string{
		"acl " + aclConnect + " method CONNECT",
		"acl " + aclConnectPorts + " port " + joinPorts(defaultConnectPorts, e.AllowedPorts),
		"acl " + aclHTTPPorts + " port " + joinPorts(defaultHTTPPorts, e.AllowedPorts),
		"acl " + aclBlocked + " dst " + joinPrefixes(BlockedCIDRs(), e.DeniedCIDRs),
	}
	if len(e.AllowedCIDRs) > 0 {
		lines = append(lines, "acl "+aclAllowed+" dst "+joinPrefixes(e.AllowedCIDRs))
	}
	lines = append(lines,
		// Squid's built-in manager ACL: cache_object:// and /squid-internal-mgr/.
		"http_access deny manager",
		"http_access deny "+aclConnect+" !"+aclConnectPorts,
		"http_access deny !"+aclConnect+" !"+aclHTTPPorts,
	)
	if len(e.AllowedCIDRs) > 0 {
		lines = append(lines, "http_access deny "+aclBlocked+" !"+aclAllowed)
	} else {
		lines = append(lines, "http_access deny "+aclBlocked)
	}
	return strings.Join(lines, "\n") + "\n"
}

// EgressError is a destination the Egress refuses.
type EgressError struct {
	Addr   netip.AddrPort
	Reason string
}

func (e *EgressError) Error() string { return fmt.Sprintf("%s: %s", e.Addr, e.Reason) }

// IsEgressRefused reports whether err is (or wraps) a refusal of the
// Egress.
func IsEgressRefused(err error) bool {
	var ee *EgressError
	return errors.As(err, &ee)
}

// Permits reports why a lease's traffic may not go to ap (nil: it may), as
// SquidRules decides it: connect is a CONNECT tunnel's, else a plain HTTP
// request's.
func (e Egress) Permits(ap netip.AddrPort, connect bool) error {
	ports, kind := defaultHTTPPorts, "plain HTTP"
	if connect {
		ports, kind = defaultConnectPorts, "CONNECT"
	}
	if !inRanges(ap.Port(), ports) && !inRanges(ap.Port(), e.AllowedPorts) {
		return &EgressError{Addr: ap, Reason: fmt.Sprintf("%s to port %d is not allowed (--proxy-allowed-ports)", kind, ap.Port())}
	}
	addr := ap.Addr().Unmap()
	if inPrefixes(addr, e.AllowedCIDRs) {
		return nil
	}
	if inPrefixes(addr, BlockedCIDRs()) || inPrefixes(addr, e.DeniedCIDRs) {
		return &EgressError{Addr: ap, Reason: "an internal address (--proxy-allowed-cidrs opens one)"}
	}
	return nil
}

func inRanges(p uint16, rs []PortRange) bool {
	for _, r := range rs {
		if r.From <= p && p <= r.To {
			return true
		}
	}
	return false
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
