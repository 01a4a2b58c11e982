package lease

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ProxyKey names a Proxy object (namespace/name).
type ProxyKey = types.NamespacedName

// ProxyInfo is what the store needs to know about one Proxy. The store copies
// it on UpsertProxy and never mutates it afterwards; callers must treat the
// Attributes of a ProxyInfo they receive from the store as read-only.
type ProxyInfo struct {
	Namespace string
	Name      string
	// URL is the forward-proxy URL crawlers use, e.g. "http://10.0.0.7:3128".
	URL           string
	Host          string
	Port          int32
	Attributes    map[string]string
	LatencyMillis int64
	// Healthy proxies are the only ones offered; unhealthy ones are still
	// counted in a NoMatchError.
	Healthy bool
	// Draining proxies are being removed (a ProxyPool scaling down): no new
	// lease, the live ones renew as usual and show it. Counted as at
	// capacity in a NoMatchError.
	Draining bool
	// External proxies run outside the operator and check no lease
	// credentials; the operator's own (Managed) do (pkg/proxyauth).
	External bool
}

// Key returns the proxy's namespace/name.
func (p ProxyInfo) Key() ProxyKey { return ProxyKey{Namespace: p.Namespace, Name: p.Name} }

func (p ProxyInfo) clone() ProxyInfo {
	p.Attributes = maps.Clone(p.Attributes)
	return p
}

// leaseVisible reports whether p and q differ in what a holder must learn:
// where the proxy is, whether it is healthy and whether it is draining (not
// its latency, which changes with every report and would flood watchers).
func (p ProxyInfo) leaseVisible(q ProxyInfo) bool {
	return p.URL != q.URL || p.Host != q.Host || p.Port != q.Port || p.Healthy != q.Healthy || p.Draining != q.Draining ||
		p.External != q.External
}

func (p ProxyInfo) equal(q ProxyInfo) bool {
	return p.Namespace == q.Namespace && p.Name == q.Name && p.URL == q.URL && p.Host == q.Host &&
		p.Port == q.Port && p.LatencyMillis == q.LatencyMillis && p.Healthy == q.Healthy && p.Draining == q.Draining && p.External == q.External &&
		maps.Equal(p.Attributes, q.Attributes)
}

// AcquireRequest asks for one lease.
type AcquireRequest struct {
	// Namespace restricts candidates to Proxies of this namespace. "" means any
	// namespace (only the HTTP API offers that; the Kubernetes API always sets it).
	Namespace string
	// Namespaces, with Namespace "", restricts candidates to Proxies of these
	// namespaces (the namespaces an HTTP token may use); nil means any.
	Namespaces []string
	// Selector must be a subset of a proxy's attributes (equality on every pair).
	Selector map[string]string
	// Selectors, instead of Selector, is a ladder of tiers, cheap first: the
	// lease is granted on the first tier with a proxy for it, and climbs
	// past a tier only when every proxy of it cools for the target
	// (ladder.go). At most sites.MaxTiers; the lease records its tier.
	Selectors []map[string]string
	// Target is the site the lease is for; proxies cooling down for it are skipped.
	Target string
	// TTL of the lease; zero means Options.DefaultTTL, over Options.MaxTTL is a *TTLError.
	TTL time.Duration
	// Holder is the identity of the caller (token identity, Kubernetes user).
	Holder string
	// Flow is the fairness flow the lease counts against (see Store.HeldBy).
	Flow string
	// Name optionally names the lease (the Kubernetes API's metadata.name); it
	// must be unique among live leases of the lease's namespace. Empty: the
	// ID, after NamePrefix.
	Name string
	// NamePrefix, with Name empty, names the lease NamePrefix + ID (the
	// Kubernetes API's generateName); the ID is then still signed
	// (Options.IDs), so the name proves the lease.
	NamePrefix string
	// Meta is kept with the lease and returned with it, in every event.
	Meta Metadata
}

// Metadata is what an API shows of a lease beyond the store's own fields, so
// that the store's events carry a lease complete. The store keeps it and
// never reads it; values must be treated as immutable once handed over.
type Metadata struct {
	Labels      map[string]string
	Annotations map[string]string
	// Extra is the rest of what the API was given, opaque to the store (the
	// Kubernetes API keeps the ProxyLease as created: owner references,
	// managed fields, the selector and priority).
	Extra any
}

// Lease is one granted lease. Values returned by the store are copies.
type Lease struct {
	ID string
	// Namespace is the namespace of the leased Proxy (a lease lives next to its proxy).
	Namespace string
	// Name is the Kubernetes name of the lease; it equals ID unless the
	// request named it.
	Name   string
	Holder string
	Flow   string
	Target string
	// Tier is the tier of the request's ladder the lease was granted on (0:
	// its first selector, or a request without a ladder).
	Tier int
	// Proxy is the proxy as it was when the lease was granted.
	Proxy      ProxyInfo
	AcquiredAt time.Time
	// ProxyChangedAt is when the proxy's address or health last changed
	// while leased (zero: not since the grant).
	ProxyChangedAt time.Time
	ExpiresAt      time.Time
	TTL            time.Duration
	// LastResult is the result of the most recent report on this lease ("" if none).
	LastResult string
	// Revision is the store revision of the last change to this lease; it
	// grows monotonically across the store (a Kubernetes resourceVersion).
	Revision uint64
	// Meta is what the request (or the last UpdateAs) gave.
	Meta Metadata
}

// Report results.
const (
	ResultOK          = "ok"
	ResultRateLimited = "rate_limited"
	ResultBanned      = "banned"
)

// Results are the results Report accepts, the one list the server checks
// reports against (the API enums, apis/leasing/v1alpha1 and
// pkg/discovery/wire, are held to it by a test).
func Results() []string { return []string{ResultOK, ResultRateLimited, ResultBanned} }

// ValidResult reports whether r is one of Results.
func ValidResult(r string) bool { return slices.Contains(Results(), r) }

// EventType says what happened to a lease.
type EventType string

// Event types, in the vocabulary of a Kubernetes watch.
const (
	Added    EventType = "Added"
	Modified EventType = "Modified"
	Deleted  EventType = "Deleted"
)

// Reason says why an event happened.
type Reason string

// Event reasons.
const (
	Acquired Reason = "Acquired"
	Released Reason = "Released"
	Expired  Reason = "Expired"
	Renewed  Reason = "Renewed"
	Reported Reason = "Reported"
	// ProxyChanged: the leased proxy's address or health changed (its
	// instance was replaced, it turned unhealthy or recovered); the lease
	// now shows the new values.
	ProxyChanged Reason = "ProxyChanged"
	// ProxyDeleted: the leased Proxy was deleted, which ended the lease.
	ProxyDeleted Reason = "ProxyDeleted"
	// Readmitted: a lease lost in a crash was taken back (Readmit).
	Readmitted Reason = "Readmitted"
)

// Event is one change to a lease, delivered to Subscribe callbacks in
// Revision order.
type Event struct {
	Type   EventType
	Reason Reason
	// Lease is the lease after the change (for Deleted: as it was when it ended).
	Lease Lease
	// Previous is the lease before a Modified change of its Meta (nil for
	// every other change, none of which touches Meta).
	Previous *Lease
	// Revision equals Lease.Revision.
	Revision uint64
}

// Options tune the store. Zero fields take the defaults below.
type Options struct {
	// MaxLeasesPerProxy caps live leases per proxy (default 1: exclusive).
	MaxLeasesPerProxy int
	// MaxTTL caps a lease's TTL and every renewal (default 1h).
	MaxTTL time.Duration
	// DefaultTTL is used when a request has no TTL (default 5m).
	DefaultTTL time.Duration
	// CooldownWindow is how long a rate_limited/banned (proxy, target) pair is
	// skipped, and how long an ended lease stays reportable (default 5m).
	CooldownWindow time.Duration
	// MaxCooldownsPerHolder bounds the cooldowns one holder's reports run at
	// once (default 1000): a report that would start one more is a
	// *CooldownLimitError.
	MaxCooldownsPerHolder int
	// MaxEndedPerHolder bounds the ended leases remembered for one holder
	// (default 50,000): past it the holder's oldest is forgotten before its
	// report window is over, and a late report or renewal on it finds no
	// lease. A holder that ends fewer than MaxEndedPerHolder leases per
	// CooldownWindow (at the defaults, 166 a second) never meets it.
	MaxEndedPerHolder int
	// SweepInterval is the longest Start's timer sleeps (default 10s): expiries
	// and cooldown ends fire at their instant; this bounds how long ended
	// leases past their report window stay in memory.
	SweepInterval time.Duration
	// NewID generates lease IDs (default: 128 random bits, lowercase hex,
	// which is also a valid Kubernetes name).
	NewID func() string
	// IDs, when set, makes the IDs of unnamed leases (see IDMaker); NewID
	// is the fallback when it returns "".
	IDs IDMaker
}

// IDMaker makes lease IDs from what a lease is (pkg/leaseid signs them, so
// that a holder can prove a lease after a crash).
type IDMaker interface {
	// NewID returns the ID of l, whose every field but ID, Revision and
	// Meta is set, and whose Name is the prefix the lease's name will have
	// before the ID (the name must stay a Kubernetes name: at most 253
	// characters); "" to let Options.NewID choose. It runs under the
	// store's lock and must not call the store. The store retries with a
	// new call if the ID is in use, so each call must return a new ID.
	NewID(l *Lease) string
}

// Defaults.
const (
	DefaultMaxLeasesPerProxy = 1
	DefaultMaxTTL            = time.Hour
	DefaultDefaultTTL        = 5 * time.Minute
	DefaultCooldownWindow    = 5 * time.Minute
	// DefaultMaxCooldownsPerHolder: at the longest target (253 bytes) a
	// holder's cooldowns take about 0.5 MB of memory and 0.3 MB of
	// checkpoint, and a crawler that is rate-limited on 1,000 (proxy, site)
	// pairs within one cooldown window has a bigger problem than this limit.
	DefaultMaxCooldownsPerHolder = 1000
	DefaultSweepInterval         = 10 * time.Second
	// DefaultMaxEndedPerHolder: an ended lease takes about 330 bytes of heap
	// (an ID of 52 characters), so a holder's take at most about 17 MB.
	DefaultMaxEndedPerHolder = 50000
)

func (o Options) withDefaults() (Options, error) {
	if o.MaxLeasesPerProxy == 0 {
		o.MaxLeasesPerProxy = DefaultMaxLeasesPerProxy
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = DefaultMaxTTL
	}
	if o.DefaultTTL == 0 {
		o.DefaultTTL = min(DefaultDefaultTTL, o.MaxTTL)
	}
	if o.CooldownWindow == 0 {
		o.CooldownWindow = DefaultCooldownWindow
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.MaxCooldownsPerHolder == 0 {
		o.MaxCooldownsPerHolder = DefaultMaxCooldownsPerHolder
	}
	if o.MaxEndedPerHolder == 0 {
		o.MaxEndedPerHolder = DefaultMaxEndedPerHolder
	}
	if o.NewID == nil {
		o.NewID = randomID
	}
	switch {
	case o.MaxLeasesPerProxy < 0:
		return o, fmt.Errorf("maxLeasesPerProxy %d must be positive", o.MaxLeasesPerProxy)
	case o.MaxCooldownsPerHolder < 0:
		return o, fmt.Errorf("maxCooldownsPerHolder %d must be positive", o.MaxCooldownsPerHolder)
	case o.MaxEndedPerHolder < 0:
		return o, fmt.Errorf("maxEndedPerHolder %d must be positive", o.MaxEndedPerHolder)
	case o.MaxTTL < 0, o.DefaultTTL < 0, o.CooldownWindow < 0, o.SweepInterval < 0:
		return o, fmt.Errorf("durations must be positive: maxTTL=%s defaultTTL=%s cooldownWindow=%s sweepInterval=%s",
			o.MaxTTL, o.DefaultTTL, o.CooldownWindow, o.SweepInterval)
	case o.DefaultTTL > o.MaxTTL:
		return o, fmt.Errorf("defaultTTL %s exceeds maxTTL %s", o.DefaultTTL, o.MaxTTL)
	}
	return o, nil
}

// TTLSeconds is the lease's TTL as both lease APIs show it: whole seconds,
// rounded up (a TTL of 1.5s is 2, never 1 nor 0), at most 2^31-1.
func (l *Lease) TTLSeconds() int32 {
	s := (l.TTL + time.Second - 1) / time.Second
	if s > 1<<31-1 {
		return 1<<31 - 1
	}
	return int32(s)
}
