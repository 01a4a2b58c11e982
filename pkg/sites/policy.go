package sites

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// Policy is one SitePolicy as the lease store applies it.
type Policy struct {
	// Name is the SitePolicy's name: metrics, status and refusals say it.
	Name string
	// Sites are hosts ("example.com": that host only) and wildcards
	// ("*.example.com": every host under example.com, not example.com).
	Sites []string
	// MaxConcurrency is the ceiling of the live leases for the policy's
	// sites, all tenants together; MinConcurrency the floor that cuts never
	// go below (at least 1).
	MaxConcurrency, MinConcurrency int
	// MaxGrantsPerSecond bounds new leases for the sites a second (0: no
	// bound), with bursts of at most max(1, MaxGrantsPerSecond).
	MaxGrantsPerSecond float64
	// IncreaseInterval is how long the limit stays after a change before
	// it may grow by one (the additive increase).
	IncreaseInterval time.Duration
	// DecreaseFactor multiplies the limit on a cut (0 < f < 1).
	DecreaseFactor float64
	// ProxyInterval is the least time between two grants of one proxy for
	// the sites (0: none): a proxy granted for them waits this long before
	// it is granted for them again, whoever asks.
	ProxyInterval time.Duration
	// HigherTiers bound the leases for the sites on a ladder's higher tiers
	// (a request's prioritized selectors): HigherTiers[0] those granted on
	// a request's second selector, HigherTiers[1] its third, and so on. A
	// tier past the list is bounded by the limit only; 0 keeps the sites
	// off the tier.
	HigherTiers []int
}

// MaxTiers is the most selectors a lease request's ladder may list (the
// lease APIs hold requests to it), so a policy bounds at most MaxTiers-1
// higher tiers.
const MaxTiers = leasingv1alpha1.MaxSelectors

// Defaults of a Policy's adaptation.
const (
	DefaultIncreaseInterval = 2 * time.Second
	DefaultDecreaseFactor   = 0.9
)

// Validate says what is wrong with p, nil if nothing.
func (p Policy) Validate() error {
	switch {
	case len(p.Sites) == 0:
		return fmt.Errorf("site policy %q: no sites", p.Name)
	case p.MinConcurrency < 1:
		return fmt.Errorf("site policy %q: minConcurrency %d: want at least 1", p.Name, p.MinConcurrency)
	case p.MaxConcurrency < p.MinConcurrency:
		return fmt.Errorf("site policy %q: maxConcurrency %d is under minConcurrency %d", p.Name, p.MaxConcurrency, p.MinConcurrency)
	case p.MaxGrantsPerSecond < 0:
		return fmt.Errorf("site policy %q: maxGrantsPerSecond %v is negative", p.Name, p.MaxGrantsPerSecond)
	case p.IncreaseInterval <= 0:
		return fmt.Errorf("site policy %q: increase interval %v: want more than 0", p.Name, p.IncreaseInterval)
	case p.DecreaseFactor <= 0 || p.DecreaseFactor >= 1:
		return fmt.Errorf("site policy %q: decrease factor %v: want between 0 and 1", p.Name, p.DecreaseFactor)
	case p.ProxyInterval < 0:
		return fmt.Errorf("site policy %q: proxy interval %v is negative", p.Name, p.ProxyInterval)
	case len(p.HigherTiers) > MaxTiers-1:
		return fmt.Errorf("site policy %q: %d higher tiers: at most %d", p.Name, len(p.HigherTiers), MaxTiers-1)
	}
	for i, n := range p.HigherTiers {
		if n < 0 || n > p.MaxConcurrency {
			return fmt.Errorf("site policy %q: higher tier %d's maxConcurrency %d: want 0 to maxConcurrency (%d)", p.Name, i+1, n, p.MaxConcurrency)
		}
	}
	for _, s := range p.Sites {
		if err := ValidateSite(s); err != nil {
			return fmt.Errorf("site policy %q: %w", p.Name, err)
		}
	}
	return nil
}

// ValidateSite says what is wrong with a policy's site, nil if nothing:
// a lowercase host name, or "*." and one.
func ValidateSite(site string) error {
	host := strings.TrimPrefix(site, "*.")
	switch {
	case host == "" || len(site) > 253:
		return fmt.Errorf("site %q: want a host name or *.host", site)
	case strings.Contains(host, "*"):
		return fmt.Errorf("site %q: a wildcard only as the first label (*.example.com)", site)
	case host != strings.ToLower(host):
		return fmt.Errorf("site %q: want lowercase", site)
	case strings.ContainsAny(host, ":/ ") || strings.HasSuffix(host, ".") || strings.HasPrefix(host, "."):
		return fmt.Errorf("site %q: want a host name (no scheme, port, path or trailing dot)", site)
	}
	return nil
}

// HostOf is the host a lease's target names: the target itself, or the
// host of a URL or host:port, lowercase and without a trailing dot.
func HostOf(target string) string {
	h := target
	if strings.Contains(h, "://") {
		if u, err := url.Parse(h); err == nil {
			h = u.Host
		}
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}
