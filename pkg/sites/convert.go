package sites

import (
	"time"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// FromSitePolicy is the Policy a SitePolicy asks for (the API's defaults
// applied where a field is unset).
func FromSitePolicy(sp *crawlv1alpha1.SitePolicy) Policy {
	p := Policy{
		Name:             sp.Name,
		Sites:            sp.Spec.Sites,
		MaxConcurrency:   int(sp.Spec.MaxConcurrency),
		MinConcurrency:   max(int(sp.Spec.MinConcurrency), 1),
		IncreaseInterval: DefaultIncreaseInterval,
		DecreaseFactor:   DefaultDecreaseFactor,
	}
	if sp.Spec.MaxGrantsPerSecond != nil {
		p.MaxGrantsPerSecond = float64(*sp.Spec.MaxGrantsPerSecond)
	}
	if s := sp.Spec.IncreaseIntervalSeconds; s > 0 {
		p.IncreaseInterval = time.Duration(s) * time.Second
	}
	if pc := sp.Spec.DecreasePercent; pc > 0 {
		p.DecreaseFactor = float64(pc) / 100
	}
	if ms := sp.Spec.MinProxyIntervalMillis; ms > 0 {
		p.ProxyInterval = time.Duration(ms) * time.Millisecond
	}
	for _, t := range sp.Spec.HigherTiers {
		p.HigherTiers = append(p.HigherTiers, int(t.MaxConcurrency))
	}
	return p
}
