package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// ErrNoMatch is returned by TryAcquire when no proxy can take the lease.
// Acquire returns a *NoMatchError instead, which also matches errors.Is(err, ErrNoMatch).
var ErrNoMatch = errors.New("no proxy matches")

// ErrExhausted is TryAcquire's ErrNoMatch when no proxy of the fleet can take
// any lease now (every one leased to its limit, unhealthy or cooling down for
// every target), whatever the request. errors.Is(err, ErrNoMatch) holds too.
var ErrExhausted error = exhaustedError{}

type exhaustedError struct{}

func (exhaustedError) Error() string        { return "no proxy can take a lease now" }
func (exhaustedError) Is(target error) bool { return target == ErrNoMatch }

// IsExhausted reports whether err is (or wraps) ErrExhausted.
func IsExhausted(err error) bool { return errors.Is(err, ErrExhausted) }

// NoMatchError explains why Acquire found no proxy. The counts add up:
// Considered = AtCapacity + InCooldown + Unhealthy + Free. Each matching
// proxy is counted once, in the first class that applies in the order
// Unhealthy, InCooldown, AtCapacity, Free: AtCapacity are the proxies a
// release can bring (leased to capacity, not cooling for the target; and
// draining ones, which nothing brings back), InCooldown those no wait
// shorter than their cooldown can.
type NoMatchError struct {
	Considered int
	AtCapacity int
	InCooldown int
	Unhealthy  int
	// Free are matching proxies that could take the lease now: always zero
	// from Acquire (it would have granted one); from Diagnose, nonzero when
	// the request was not offered them (earlier requests of its flow for
	// the same proxies wait ahead of it) or capacity appeared since.
	Free int
	// Site, when set, is why the target's site budget refused the lease
	// (whatever the proxies' counts say).
	Site *sites.Refusal
	// Tier is the tier of the request's ladder the counts are of: where
	// it stopped (0 without a ladder).
	Tier int
}

func (e *NoMatchError) Error() string {
	msg := fmt.Sprintf("no proxy matches: considered %d, at capacity %d, in cooldown %d, unhealthy %d",
		e.Considered, e.AtCapacity, e.InCooldown, e.Unhealthy)
	if e.Free > 0 {
		msg += fmt.Sprintf(", free %d", e.Free)
	}
	if e.Tier > 0 {
		msg += fmt.Sprintf(" (on tier %d, its selector %d: the tiers before it cool for the target)", e.Tier, e.Tier+1)
	}
	if e.Site != nil {
		msg = e.Site.Error() + "; " + msg
	}
	return msg
}

// Is makes errors.Is(err, ErrNoMatch) true for a *NoMatchError.
func (e *NoMatchError) Is(target error) bool { return target == ErrNoMatch }

// IsNoMatch reports whether err says that no proxy could take a lease.
func IsNoMatch(err error) bool { return errors.Is(err, ErrNoMatch) }

// ErrUnknownLease: no live lease has this ID (and no ended one within the report window).
var ErrUnknownLease = errors.New("unknown lease")

// IsUnknownLease reports whether err is (or wraps) ErrUnknownLease.
func IsUnknownLease(err error) bool { return errors.Is(err, ErrUnknownLease) }

// ErrLeaseEnded: Renew on a lease that was released or expired recently
// (still remembered for reports, but it can no longer be extended).
var ErrLeaseEnded = errors.New("lease ended")

// EndedError is the ErrLeaseEnded of one lease, with why it ended.
type EndedError struct{ Reason Reason }

func (e *EndedError) Error() string {
	switch e.Reason {
	case ProxyDeleted:
		return "lease ended: its proxy was deleted"
	case Expired:
		return "lease ended: it expired"
	case Released:
		return "lease ended: it was released"
	}
	return "lease ended"
}

// Is makes errors.Is(err, ErrLeaseEnded) true.
func (e *EndedError) Is(target error) bool { return target == ErrLeaseEnded }

// EndReason returns why the lease of an ErrLeaseEnded error ended ("" if
// err does not say).
func EndReason(err error) Reason {
	var e *EndedError
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// IsLeaseEnded reports whether err is (or wraps) ErrLeaseEnded.
func IsLeaseEnded(err error) bool { return errors.Is(err, ErrLeaseEnded) }

// ErrFrozen is every lease change after Freeze: this replica stopped
// serving leases (it is shutting down or lost its leadership).
var ErrFrozen = errors.New("this replica stopped serving leases (shutting down, or no longer the leader); retry, another replica serves")

// IsFrozen reports whether err is (or wraps) ErrFrozen.
func IsFrozen(err error) bool { return errors.Is(err, ErrFrozen) }

// ErrInvalidResult: Report got a result other than ok, rate_limited, banned.
var ErrInvalidResult = errors.New("invalid result: want ok, rate_limited or banned")

// IsInvalidResult reports whether err is (or wraps) ErrInvalidResult.
func IsInvalidResult(err error) bool { return errors.Is(err, ErrInvalidResult) }

// ErrNotHolder: a release, renewal or report on a lease by someone other
// than its holder. The lease is left as it was.
var ErrNotHolder = errors.New("not the holder of this lease")

// NotHolderError is the ErrNotHolder of one lease. It names the lease, never
// its holder: the caller may not know who holds it.
type NotHolderError struct{ ID string }

func (e *NotHolderError) Error() string {
	return fmt.Sprintf("lease %s is held by another identity", e.ID)
}

// Is makes errors.Is(err, ErrNotHolder) true.
func (e *NotHolderError) Is(target error) bool { return target == ErrNotHolder }

// IsNotHolder reports whether err is (or wraps) ErrNotHolder.
func IsNotHolder(err error) bool { return errors.Is(err, ErrNotHolder) }

// ErrNegativeTTL: a TTL below zero.
var ErrNegativeTTL = errors.New("ttl must not be negative")

// IsNegativeTTL reports whether err is (or wraps) ErrNegativeTTL.
func IsNegativeTTL(err error) bool { return errors.Is(err, ErrNegativeTTL) }

// TTLError: a TTL over Options.MaxTTL. It is an error, not a silent clamp, so
// a client asking for a week finds out.
type TTLError struct {
	Requested time.Duration
	Max       time.Duration
}

func (e *TTLError) Error() string {
	return fmt.Sprintf("ttl %s exceeds the maximum %s", e.Requested, e.Max)
}

// IsTTLTooLong reports whether err is (or wraps) a *TTLError.
func IsTTLTooLong(err error) bool {
	var t *TTLError
	return errors.As(err, &t)
}

// AlreadyExistsError: a named lease request collides with a live lease.
type AlreadyExistsError struct {
	Namespace, Name string
}

func (e *AlreadyExistsError) Error() string {
	return fmt.Sprintf("lease %s/%s already exists", e.Namespace, e.Name)
}

// IsAlreadyExists reports whether err is (or wraps) an *AlreadyExistsError.
func IsAlreadyExists(err error) bool {
	var a *AlreadyExistsError
	return errors.As(err, &a)
}

// NoRoomError is Readmit's answer when the proxy of a lease lost in a crash
// has been leased up to MaxLeasesPerProxy since: the lease cannot come back.
type NoRoomError struct {
	ID    string
	Proxy ProxyKey
}

func (e *NoRoomError) Error() string {
	return fmt.Sprintf("lease %s was lost in an operator crash and its proxy %s has been leased to capacity since; acquire a new lease", e.ID, e.Proxy)
}

// IsNoRoom reports whether err is a *NoRoomError.
func IsNoRoom(err error) bool {
	var e *NoRoomError
	return errors.As(err, &e)
}

// ErrNoTarget: a rate_limited or banned report names no target and its lease
// has none. Such a report would cool the proxy for every target, taking it
// from every other tenant.
var ErrNoTarget = errors.New("a rate_limited or banned report must name the target it is about when its lease has none")

// IsNoTarget reports whether err is (or wraps) ErrNoTarget.
func IsNoTarget(err error) bool { return errors.Is(err, ErrNoTarget) }

// CooldownLimitError: a report would start a cooldown while the lease's
// holder already runs Max (Options.MaxCooldownsPerHolder). Each of them ends
// at most Window after the last report that extended it.
type CooldownLimitError struct {
	Holder string
	Max    int
	Window time.Duration
}

func (e *CooldownLimitError) Error() string {
	return fmt.Sprintf("the reports on leases of %q already run %d cooldowns, the most one holder may (each ends at most %s after its last report)",
		e.Holder, e.Max, e.Window)
}

// IsCooldownLimit reports whether err is (or wraps) a *CooldownLimitError.
func IsCooldownLimit(err error) bool {
	var e *CooldownLimitError
	return errors.As(err, &e)
}
