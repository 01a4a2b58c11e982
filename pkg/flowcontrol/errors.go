package flowcontrol

import (
	"errors"
	"fmt"
	"time"
)

// Category sentinels: every error returned for a request that did not get a
// grant wraps exactly one of them.
var (
	// ErrRejected: the request was never queued.
	ErrRejected = errors.New("request rejected")
	// ErrEvicted: the request was queued and left without a grant.
	ErrEvicted = errors.New("request evicted")
)

// Cause sentinels, wrapped next to the category.
var (
	// ErrQueueFull: a queue limit was reached (OutcomeRejectedCapacity).
	ErrQueueFull = errors.New("wait queue full")
	// ErrShutdown: the controller is shut down or shutting down.
	ErrShutdown = errors.New("flow control shut down")
	// ErrDeadline: the request's deadline passed before capacity appeared.
	ErrDeadline = errors.New("deadline passed before capacity appeared")
	// ErrCancelled: the caller went away (its context ended or it called Cancel).
	ErrCancelled = errors.New("request cancelled")
	// ErrInvalidRequest: the request cannot be queued as it stands (empty flow).
	ErrInvalidRequest = errors.New("invalid request")
)

// Limit names the queue limit a capacity rejection hit.
type Limit string

// Limits.
const (
	LimitFlow   Limit = "flow"
	LimitBand   Limit = "band"
	LimitGlobal Limit = "global"
	LimitOwner  Limit = "owner"
)

// RejectedError is returned for a request that was never queued. It matches
// errors.Is(err, ErrRejected) and errors.Is(err, Cause).
type RejectedError struct {
	// Outcome is OutcomeRejectedCapacity or OutcomeRejectedOther.
	Outcome Outcome
	// Limit is the limit reached (capacity rejections only).
	Limit Limit
	// Cause says why (ErrQueueFull, ErrShutdown, ErrDeadline, ErrInvalidRequest,
	// a context error, or a dispatcher error).
	Cause error
	// QueuedAhead is, for a request that could not wait (ErrDeadline) and
	// was not offered to the dispatcher because requests of its class wait,
	// how many of them wait ahead of it. Zero otherwise.
	QueuedAhead int
	retryAfter  time.Duration
}

func (e *RejectedError) Error() string {
	if e.Limit != "" {
		return fmt.Sprintf("%s: %s limit reached: %v", ErrRejected, e.Limit, e.Cause)
	}
	return fmt.Sprintf("%s: %v", ErrRejected, e.Cause)
}

// Unwrap exposes both the category and the cause.
func (e *RejectedError) Unwrap() []error { return []error{ErrRejected, e.Cause} }

// RetryAfter is how long the caller should wait before trying again (the
// HTTP Retry-After of a 429). Zero for rejections other than capacity.
func (e *RejectedError) RetryAfter() time.Duration { return e.retryAfter }

// EvictedError is returned for a request that was queued and left without a
// grant. It matches errors.Is(err, ErrEvicted) and errors.Is(err, Cause).
type EvictedError struct {
	// Outcome is one of the OutcomeEvicted… values.
	Outcome Outcome
	// Cause says why (ErrDeadline, ErrCancelled, ErrShutdown, or a dispatcher
	// error), possibly joined with the caller's context error.
	Cause error
	// QueuedAhead is, for a deadline eviction, how many requests of its
	// class were still queued ahead of it. Zero otherwise.
	QueuedAhead int
}

func (e *EvictedError) Error() string { return fmt.Sprintf("%s: %v", ErrEvicted, e.Cause) }

// Unwrap exposes both the category and the cause.
func (e *EvictedError) Unwrap() []error { return []error{ErrEvicted, e.Cause} }

// IsRejected reports whether err says the request was never queued.
func IsRejected(err error) bool { return errors.Is(err, ErrRejected) }

// IsEvicted reports whether err says the request was queued and left without a grant.
func IsEvicted(err error) bool { return errors.Is(err, ErrEvicted) }

// IsQueueFull reports whether err is a capacity rejection (HTTP 429).
func IsQueueFull(err error) bool { return errors.Is(err, ErrQueueFull) }

// IsShutdown reports whether err was caused by shutdown (rejected or evicted).
func IsShutdown(err error) bool { return errors.Is(err, ErrShutdown) }

// IsDeadline reports whether err was caused by a deadline.
func IsDeadline(err error) bool { return errors.Is(err, ErrDeadline) }

// IsCancelled reports whether err was caused by the caller going away.
func IsCancelled(err error) bool { return errors.Is(err, ErrCancelled) }

// QueuedAhead returns how many requests of the same flow and class waited
// ahead of a request that ended without a grant for lack of time (see
// RejectedError.QueuedAhead, EvictedError.QueuedAhead); 0 for other errors.
func QueuedAhead(err error) int {
	var r *RejectedError
	if errors.As(err, &r) {
		return r.QueuedAhead
	}
	var e *EvictedError
	if errors.As(err, &e) {
		return e.QueuedAhead
	}
	return 0
}

// RetryAfter returns the retry hint of a capacity rejection, and false for any
// other error.
func RetryAfter(err error) (time.Duration, bool) {
	var r *RejectedError
	if errors.As(err, &r) && r.Outcome == OutcomeRejectedCapacity {
		return r.retryAfter, true
	}
	return 0, false
}

// OutcomeOf returns the outcome carried by an error of this package,
// OutcomeDispatched for nil, and OutcomePending for foreign errors.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return OutcomeDispatched
	}
	var r *RejectedError
	if errors.As(err, &r) {
		return r.Outcome
	}
	var e *EvictedError
	if errors.As(err, &e) {
		return e.Outcome
	}
	return OutcomePending
}

// evictionCause is the cause sentinel of an eviction outcome.
func evictionCause(o Outcome) error {
	switch o {
	case OutcomeEvictedDeadline:
		return ErrDeadline
	case OutcomeEvictedCancelled:
		return ErrCancelled
	case OutcomeEvictedShutdown:
		return ErrShutdown
	}
	return errors.New("dispatcher failed")
}
