package leasing

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Reason is the one error vocabulary of the lease service. Each front door
// maps a Reason to its status codes in one function; nothing else of an
// error decides an answer.
type Reason string

const (
	// ReasonNoMatch: no proxy could take the lease before the deadline
	// (Error.Counts say why).
	ReasonNoMatch Reason = "NoMatch"
	// ReasonQueueFull: a wait-queue limit refused the request at once
	// (Error.RetryAfter).
	ReasonQueueFull Reason = "QueueFull"
	// ReasonShuttingDown: the process is stopping; another replica (or this
	// one, restarted) serves.
	ReasonShuttingDown Reason = "ShuttingDown"
	// ReasonInvalid: the request is malformed (Error.Fields name the fields,
	// relative to the request: "ttlSeconds", "waitSeconds", "result").
	ReasonInvalid Reason = "Invalid"
	// ReasonNotFound: no such lease (nor one that ended within the cooldown
	// window, for a report).
	ReasonNotFound Reason = "NotFound"
	// ReasonEnded: the lease ended (Error.EndReason says how).
	ReasonEnded Reason = "Ended"
	// ReasonForbidden: the lease is another holder's.
	ReasonForbidden Reason = "Forbidden"
	// ReasonAlreadyExists: a live lease of the namespace has the name.
	ReasonAlreadyExists Reason = "AlreadyExists"
	// ReasonCancelled: the caller left (or its request timed out) first;
	// nothing is left behind.
	ReasonCancelled Reason = "Cancelled"
	// ReasonNotLeader: this replica does not serve leases (a standby, or the
	// leader still loading its checkpoint); Error.Leader names who does.
	ReasonNotLeader Reason = "NotLeader"
	// ReasonNoRoom: a lease lost in an operator crash cannot be taken back:
	// its proxy has been leased to capacity since.
	ReasonNoRoom Reason = "NoRoom"
	// ReasonCooldownLimit: the report would start a cooldown while the
	// lease's holder already runs as many as one holder may
	// (--lease-max-cooldowns-per-holder); the lease itself is unchanged.
	ReasonCooldownLimit Reason = "CooldownLimit"
	// ReasonInternal: a bug; the message says what.
	ReasonInternal Reason = "Internal"
)

// Error is every error the service returns.
type Error struct {
	Reason Reason
	// Counts explain a ReasonNoMatch (additive, see lease.NoMatchError).
	Counts lease.NoMatchError
	// QueuedAhead, for a ReasonNoMatch, counts the requests of the same
	// flow for the same namespace, selector and target that waited ahead
	// of this one: it was not offered the proxies Counts.Free shows.
	QueuedAhead int
	// RetryAfter is when a ReasonQueueFull request may be retried.
	RetryAfter time.Duration
	// Fields are the invalid fields of a ReasonInvalid.
	Fields field.ErrorList
	// MaxTTL is set when a ReasonInvalid TTL is over the maximum.
	MaxTTL time.Duration
	// InvalidResult: the ReasonInvalid is a report result that is not one
	// of the known results (the HTTP API's invalid_result).
	InvalidResult bool
	// EndReason says how a ReasonEnded lease ended.
	EndReason lease.Reason
	// Leader is the replica that serves, for a ReasonNotLeader ("" if
	// unknown).
	Leader string
	// ID is the lease the error is about, if any.
	ID string
	// Cause says why in words: the store's, the queue's or the Gate's own
	// error (nil: the Reason says it all).
	Cause error
}

func (e *Error) Error() string {
	switch e.Reason {
	case ReasonInvalid:
		return "invalid lease request: " + e.Fields.ToAggregate().Error()
	case ReasonNoMatch:
		if e.QueuedAhead > 0 {
			return e.Counts.Error() + "; " + e.QueuedAheadMessage()
		}
		return e.Counts.Error()
	}
	if e.Cause != nil {
		return e.Cause.Error()
	}
	return string(e.Reason)
}

func (e *Error) Unwrap() error { return e.Cause }

// QueuedAheadMessage says why a ReasonNoMatch with QueuedAhead > 0 was
// refused although proxies are free.
func (e *Error) QueuedAheadMessage() string {
	return fmt.Sprintf("%d earlier requests of this flow for the same target and selector wait for a proxy ahead of this one", e.QueuedAhead)
}

// ReasonOf is the Reason of an error the service returned ("" for nil,
// ReasonInternal for an error that is not an *Error).
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonInternal
}

// AsError returns err as an *Error (a ReasonInternal one for any other error).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Reason: ReasonInternal, Cause: err}
}

// IsNoMatch, IsQueueFull, … report the Reason of err.
func IsNoMatch(err error) bool       { return ReasonOf(err) == ReasonNoMatch }
func IsQueueFull(err error) bool     { return ReasonOf(err) == ReasonQueueFull }
func IsShuttingDown(err error) bool  { return ReasonOf(err) == ReasonShuttingDown }
func IsInvalid(err error) bool       { return ReasonOf(err) == ReasonInvalid }
func IsNotFound(err error) bool      { return ReasonOf(err) == ReasonNotFound }
func IsEnded(err error) bool         { return ReasonOf(err) == ReasonEnded }
func IsForbidden(err error) bool     { return ReasonOf(err) == ReasonForbidden }
func IsAlreadyExists(err error) bool { return ReasonOf(err) == ReasonAlreadyExists }
func IsCancelled(err error) bool     { return ReasonOf(err) == ReasonCancelled }
func IsNotLeader(err error) bool     { return ReasonOf(err) == ReasonNotLeader }
func IsNoRoom(err error) bool        { return ReasonOf(err) == ReasonNoRoom }
func IsCooldownLimit(err error) bool { return ReasonOf(err) == ReasonCooldownLimit }

func invalid(errs ...*field.Error) *Error {
	return &Error{Reason: ReasonInvalid, Fields: errs}
}

// FromStore is an error of the lease store in the service's vocabulary:
// the one place the store's typed errors become Reasons (for the Waiter,
// and a Queue of a test's that answers from a store).
func FromStore(err error) error { return storeError("", err) }

// storeError is FromStore for a call about lease id ("" for an acquire).
func storeError(id string, err error) error {
	if err == nil {
		return nil
	}
	var (
		e       *Error
		noMatch *lease.NoMatchError
	)
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &noMatch):
		return &Error{Reason: ReasonNoMatch, Counts: *noMatch, ID: id, Cause: err}
	case lease.IsNoMatch(err):
		return &Error{Reason: ReasonNoMatch, ID: id, Cause: err}
	case lease.IsFrozen(err):
		return &Error{Reason: ReasonShuttingDown, ID: id, Cause: err}
	case lease.IsTTLTooLong(err), lease.IsNegativeTTL(err):
		e := invalidTTL(err, 0)
		e.ID = id
		return e
	case lease.IsInvalidResult(err):
		e := invalidResult("")
		e.ID, e.Cause = id, err
		return e
	case lease.IsNoTarget(err):
		e := invalid(field.Required(field.NewPath("target"),
			"a rate_limited or banned report must name the site it is about when its lease names none (a proxy is never cooled for every site: that would take it from every tenant)"))
		e.ID, e.Cause = id, err
		return e
	case lease.IsCooldownLimit(err):
		return &Error{Reason: ReasonCooldownLimit, ID: id, Cause: fmt.Errorf("%w (--lease-max-cooldowns-per-holder)", err)}
	case lease.IsAlreadyExists(err):
		return &Error{Reason: ReasonAlreadyExists, ID: id, Cause: err}
	case lease.IsNoRoom(err):
		return &Error{Reason: ReasonNoRoom, ID: id, Cause: err}
	case lease.IsNotHolder(err):
		return &Error{Reason: ReasonForbidden, ID: id, Cause: err}
	case lease.IsLeaseEnded(err):
		return &Error{Reason: ReasonEnded, EndReason: lease.EndReason(err), ID: id, Cause: err}
	case lease.IsUnknownLease(err):
		return &Error{Reason: ReasonNotFound, ID: id, Cause: err}
	}
	return &Error{Reason: ReasonInternal, ID: id, Cause: err}
}

// invalidResult is the ReasonInvalid of a report result that is not one of
// lease.Results.
func invalidResult(result string) *Error {
	e := invalid(field.NotSupported(field.NewPath("result"), result, lease.Results()))
	e.InvalidResult = true
	return e
}

// invalidTTL is the ReasonInvalid of a TTL the store refuses (err is
// lease.Store.CheckTTL's, or the store's on a grant or renewal); requested is
// the TTL asked for, where the error does not say.
func invalidTTL(err error, requested time.Duration) *Error {
	path := field.NewPath("ttlSeconds")
	var tooLong *lease.TTLError
	if errors.As(err, &tooLong) {
		e := invalid(field.Invalid(path, int64(tooLong.Requested/time.Second),
			fmt.Sprintf("exceeds the maximum %d (--max-lease-ttl=%s)", int64(tooLong.Max/time.Second), tooLong.Max)))
		e.MaxTTL, e.Cause = tooLong.Max, err
		return e
	}
	e := invalid(field.Invalid(path, int64(requested/time.Second), "must not be negative (0 means the default)"))
	e.Cause = err
	return e
}

// EndedMessage says why a ReasonEnded lease ended and what to do.
func EndedMessage(err error) string {
	e := AsError(err)
	msg := (&lease.EndedError{Reason: e.EndReason}).Error()
	if e.EndReason == "" {
		msg = "lease ended: released or expired"
	}
	return strings.TrimPrefix(msg, "lease ") + "; acquire a new one"
}
