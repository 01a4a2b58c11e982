package sites

import (
	"fmt"
	"math"
	"time"
)

// Budget is one policy's budget. It bounds a site two ways, both adapted:
// the leases live at once (limit) and the new leases a second (rate, a
// token bucket). A cut on a refused report sets the limit to DecreaseFactor
// of itself, and the rate to DecreaseFactor of the grants in the last second
// (what the site was taking, so that a rate far above it still bites);
// after IncreaseInterval in full use each grows by a step, half of its last
// cut (the limit by at least one), up to the policy's ceilings.
type Budget struct {
	policy Policy
	limit  int
	live   int
	// rate is the adapted grants a second (0: no bound yet); rateStep its
	// additive increase.
	rate, rateStep float64
	// limitStep is the limit's additive increase.
	limitStep int
	// changed is when the bounds were last cut or raised; cutAt when last
	// cut.
	changed, cutAt time.Time
	// full: since changed, a lease was refused for a bound or filled the
	// limit (only a site that uses its budget earns a raise).
	full bool
	// tokens and tokensAt are the rate's bucket.
	tokens   float64
	tokensAt time.Time
	// recent counts grants in the tenths of the last second.
	recent     [10]int
	recentTick int64
	// window counts leases ended and reported refused in the current and
	// the previous shareWindow, for the rate-limited share.
	window      [2]windowCounts
	windowStart time.Time
	cuts        int64
	// tierLive counts the live leases on each tier of a ladder (index 0:
	// a request's first selector, or a lease without a ladder); tier is
	// the tier of the newest grant.
	tierLive [MaxTiers]int
	tier     int
	// spaced are the grants of the last ProxyInterval, oldest first (from
	// spacedHead); lastGrant each proxy's newest of them.
	spaced     []spacedGrant
	spacedHead int
	lastGrant  map[string]time.Time
}

type spacedGrant struct {
	proxy string
	at    time.Time
}

type windowCounts struct{ ended, refused int }

const (
	// shareWindow is the span of the rate-limited share (two of them).
	shareWindow = 30 * time.Second
	// cutSpacing: a report cuts only for a lease granted at least this long
	// after the last cut. A site's rate window is commonly a second: a
	// lease granted sooner met a site still counting what came before the
	// cut, and its refusal is the signal the cut already answered.
	cutSpacing = time.Second
	// minRate is the lowest adapted rate, grants a second.
	minRate = 0.2
)

func newBudget(p Policy) *Budget {
	b := &Budget{policy: p, limit: p.MaxConcurrency, rate: p.MaxGrantsPerSecond}
	b.tokens = b.burst()
	return b
}

// burst is the bucket's size: a second's worth, at least one.
func (b *Budget) burst() float64 { return math.Max(1, b.rate) }

func (b *Budget) carry(o *Budget) {
	b.limit = min(max(o.limit, b.policy.MinConcurrency), b.policy.MaxConcurrency)
	b.rate, b.rateStep, b.limitStep = o.rate, o.rateStep, o.limitStep
	if c := b.policy.MaxGrantsPerSecond; c > 0 && (b.rate == 0 || b.rate > c) {
		b.rate = c
	}
	b.changed, b.cutAt, b.full = o.changed, o.cutAt, o.full
	b.tokens, b.tokensAt = math.Min(o.tokens, b.burst()), o.tokensAt
	b.recent, b.recentTick = o.recent, o.recentTick
	b.window, b.windowStart, b.cuts = o.window, o.windowStart, o.cuts
	b.tier = o.tier
	if b.policy.ProxyInterval > 0 {
		b.spaced, b.spacedHead, b.lastGrant = o.spaced, o.spacedHead, o.lastGrant
	}
}

// Policy is the budget's policy.
func (b *Budget) Policy() Policy { return b.policy }

// Live is the leases for the site it counts live; Limit how many it
// admits now.
func (b *Budget) Live() int  { return b.live }
func (b *Budget) Limit() int { return b.limit }

// Refusal says why a lease for the site waits: the limit in use, the grant
// rate, or the budget of the ladder's tier it climbed to (Tier > 0, Limit
// and Live that tier's). Retry is when the rate lets the next lease through
// (zero: when a lease for the site ends, or the limit is raised).
type Refusal struct {
	Policy      string
	Limit, Live int
	Tier        int
	Retry       time.Time
}

func (r *Refusal) Error() string {
	if r.Tier > 0 {
		return fmt.Sprintf("SitePolicy %q: the site's %d leases on tier %d (its selector %d) are in use", r.Policy, r.Limit, r.Tier, r.Tier+1)
	}
	if !r.Retry.IsZero() {
		return fmt.Sprintf("SitePolicy %q: the site's grant rate is in use", r.Policy)
	}
	return fmt.Sprintf("SitePolicy %q: the site's %d leases are in use (its limit now)", r.Policy, r.Limit)
}

// Admit says whether a lease for the site may be granted at now: nil, or
// why it must wait. Granted and Attach follow a grant.
func (b *Budget) Admit(now time.Time) *Refusal {
	b.advance(now)
	if b.live >= b.limit {
		b.full = true
		return &Refusal{Policy: b.policy.Name, Limit: b.limit, Live: b.live}
	}
	if b.rate > 0 && b.tokens < 1 {
		b.full = true
		wait := time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
		return &Refusal{Policy: b.policy.Name, Limit: b.limit, Live: b.live, Retry: now.Add(max(wait, time.Millisecond))}
	}
	return nil
}

// AdmitTier says whether a lease for the site may be granted on tier (of
// a ladder: 0 is a request's first selector) by the tier's own budget:
// nil, or why it must wait. The first tier has none of its own (Admit's
// limit bounds every tier together), nor has a tier past HigherTiers.
func (b *Budget) AdmitTier(tier int) *Refusal {
	if tier < 1 || tier > len(b.policy.HigherTiers) {
		return nil
	}
	limit := b.policy.HigherTiers[tier-1]
	if live := b.tierLive[min(tier, MaxTiers-1)]; live >= limit {
		return &Refusal{Policy: b.policy.Name, Limit: limit, Live: live, Tier: tier}
	}
	return nil
}

// Spaced says whether the policy spaces the grants of one proxy
// (ProxyInterval): only then need ProxyReady be asked.
func (b *Budget) Spaced() bool { return b.policy.ProxyInterval > 0 }

// ProxyReady says whether proxy (its namespace/name) may be granted for
// the site at now: not granted for it within the last ProxyInterval.
func (b *Budget) ProxyReady(proxy string, now time.Time) bool {
	at, ok := b.lastGrant[proxy]
	return !ok || now.Sub(at) >= b.policy.ProxyInterval
}

// Granted spends the rate on a lease granted for the site on tier, on
// proxy, at now (after Admit, AdmitTier and ProxyReady); Attach counts it
// live.
func (b *Budget) Granted(now time.Time, tier int, proxy string) {
	b.advance(now)
	if b.rate > 0 {
		b.tokens--
	}
	b.recent[b.recentTick%10]++
	b.tier = tier
	if b.Spaced() {
		if b.lastGrant == nil {
			b.lastGrant = map[string]time.Time{}
		}
		b.lastGrant[proxy] = now
		b.spaced = append(b.spaced, spacedGrant{proxy: proxy, at: now})
	}
}

// Attach counts a live lease for the site on tier: one just granted, or
// one the store already held when the policy was set or a checkpoint
// loaded.
func (b *Budget) Attach(tier int) {
	b.live++
	b.tierLive[min(max(tier, 0), MaxTiers-1)]++
	if b.live >= b.limit {
		b.full = true
	}
}

// Ended uncounts a lease for the site on tier that ended at now.
func (b *Budget) Ended(now time.Time, tier int) {
	b.roll(now)
	b.live = max(b.live-1, 0)
	t := &b.tierLive[min(max(tier, 0), MaxTiers-1)]
	*t = max(*t-1, 0)
	b.window[0].ended++
}

// TierLive is the live leases for the site on tier.
func (b *Budget) TierLive(tier int) int {
	if tier < 0 || tier >= MaxTiers {
		return 0
	}
	return b.tierLive[tier]
}

// Reported applies a rate_limited or banned report at now on a lease for
// the site granted at acquiredAt: the limit is cut to DecreaseFactor of
// itself, the rate to DecreaseFactor of the grants in the last second (never
// under the floors). Once per signal: a report on a
// lease granted before the last cut, or within cutSpacing after it, was
// answered by it. It says whether it cut.
func (b *Budget) Reported(acquiredAt, now time.Time) bool {
	b.advance(now)
	b.window[0].refused++
	if !b.cutAt.IsZero() && acquiredAt.Before(b.cutAt.Add(cutSpacing)) {
		return false
	}
	f := b.policy.DecreaseFactor
	old := b.limit
	b.limit = max(int(math.Floor(f*float64(old))), b.policy.MinConcurrency)
	b.limitStep = max(1, (old-b.limit)/2)
	granted := float64(b.grantsLastSecond())
	if b.rate > 0 {
		granted = math.Min(granted, b.rate)
	}
	if granted > 0 {
		newRate := math.Max(f*granted, minRate)
		b.rateStep = math.Max((granted-newRate)/2, minRate)
		b.rate = newRate
		b.tokens = math.Min(b.tokens, b.burst())
	}
	b.cutAt, b.changed, b.full = now, now, false
	b.cuts++
	return true
}

// Advance applies what is due at now, and says whether a lease refused
// before could now be admitted (a bound was raised while in full use, or
// the rate has a token again).
func (b *Budget) Advance(now time.Time) bool { return b.advance(now) }

// advance raises the bounds by a step when they have stood
// IncreaseInterval in full use, refills the bucket, moves the windows and
// frees the proxies whose interval has passed.
func (b *Budget) advance(now time.Time) (opened bool) {
	b.roll(now)
	opened = b.unspace(now)
	if tick := now.UnixNano() / int64(100*time.Millisecond); tick != b.recentTick {
		for t := b.recentTick + 1; t <= tick && t <= b.recentTick+10; t++ {
			b.recent[t%10] = 0
		}
		b.recentTick = tick
	}
	if b.full && now.Sub(b.changed) >= b.policy.IncreaseInterval {
		raised := false
		if b.limit < b.policy.MaxConcurrency {
			b.limit = min(b.limit+max(b.limitStep, 1), b.policy.MaxConcurrency)
			raised = true
		}
		if b.rate > 0 && b.rateStep > 0 {
			b.rate += b.rateStep
			if c := b.policy.MaxGrantsPerSecond; c > 0 && b.rate >= c {
				b.rate, b.rateStep = c, 0
			}
			raised = true
		}
		if raised {
			b.changed, b.full = now, false
			opened = true
		}
	}
	if b.rate > 0 {
		before := b.tokens
		if !b.tokensAt.IsZero() && now.After(b.tokensAt) {
			b.tokens = math.Min(b.burst(), b.tokens+now.Sub(b.tokensAt).Seconds()*b.rate)
		}
		b.tokensAt = now
		opened = opened || (before < 1 && b.tokens >= 1)
	}
	return opened
}

// unspace forgets the grants older than ProxyInterval (in grant order,
// since the interval is one), and says whether a proxy was freed.
func (b *Budget) unspace(now time.Time) bool {
	freed := false
	for b.spacedHead < len(b.spaced) {
		g := b.spaced[b.spacedHead]
		if now.Sub(g.at) < b.policy.ProxyInterval {
			break
		}
		if b.lastGrant[g.proxy].Equal(g.at) {
			delete(b.lastGrant, g.proxy)
			freed = true
		}
		b.spaced[b.spacedHead] = spacedGrant{}
		b.spacedHead++
	}
	if b.spacedHead > 64 && b.spacedHead*2 > len(b.spaced) {
		b.spaced = append(b.spaced[:0], b.spaced[b.spacedHead:]...)
		b.spacedHead = 0
	}
	return freed
}

func (b *Budget) grantsLastSecond() int {
	n := 0
	for _, c := range b.recent {
		n += c
	}
	return n
}

// NextChange is when a lease refused now could be admitted without any
// lease ending: the next raise of bounds in full use, the rate's next
// token, or a proxy's interval passing; zero when only an end can.
func (b *Budget) NextChange() time.Time {
	var at time.Time
	if b.spacedHead < len(b.spaced) {
		at = b.spaced[b.spacedHead].at.Add(b.policy.ProxyInterval)
	}
	if b.full && (b.limit < b.policy.MaxConcurrency || b.rateStep > 0) && (b.live >= b.limit || b.tokens < 1) {
		if t := b.changed.Add(b.policy.IncreaseInterval); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if b.rate > 0 && b.tokens < 1 && b.live < b.limit {
		t := b.tokensAt.Add(max(time.Duration((1-b.tokens)/b.rate*float64(time.Second)), time.Millisecond))
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

// roll moves the share's window along.
func (b *Budget) roll(now time.Time) {
	switch {
	case b.windowStart.IsZero():
		b.windowStart = now
	case now.Sub(b.windowStart) >= 2*shareWindow:
		b.window = [2]windowCounts{}
		b.windowStart = now
	case now.Sub(b.windowStart) >= shareWindow:
		b.window[1], b.window[0] = b.window[0], windowCounts{}
		b.windowStart = b.windowStart.Add(shareWindow)
	}
}

// Status is a budget's state, for the SitePolicy's status and metrics.
type Status struct {
	Policy string
	// Limit is the leases the site may have live now; Live those it has.
	Limit, Live int
	// Rate is the new leases a second it may take now (0: no bound).
	Rate float64
	// RefusedShare is the share of the site's leases over the last 30–60 s
	// reported rate_limited or banned (reports over leases ended and
	// reported, at most 1).
	RefusedShare float64
	// Cuts counts the cuts since the operator started.
	Cuts int64
	// Tier is the ladder's tier of the newest lease granted for the site
	// (0: a request's first selector, or a lease without a ladder).
	Tier int
	// TierLive is the live leases on each tier, from the first, up to the
	// highest tier with a live lease or a budget (nil: only the first).
	TierLive []int
}

// Status is b's state at now.
func (b *Budget) Status(now time.Time) Status {
	b.advance(now)
	ended := b.window[0].ended + b.window[1].ended
	refused := b.window[0].refused + b.window[1].refused
	share := 0.0
	if n := max(ended, refused); n > 0 {
		share = float64(refused) / float64(n)
	}
	st := Status{Policy: b.policy.Name, Limit: b.limit, Live: b.live, Rate: b.rate, RefusedShare: share, Cuts: b.cuts, Tier: b.tier}
	n := len(b.policy.HigherTiers) + 1
	for i := n; i < MaxTiers; i++ {
		if b.tierLive[i] > 0 {
			n = i + 1
		}
	}
	if n > 1 {
		st.TierLive = append([]int(nil), b.tierLive[:n]...)
	}
	return st
}
