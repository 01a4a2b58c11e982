package provider

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The error classes. Every error a Provider returns belongs to exactly one, as
// Class reports; the reconciler's answer depends only on the class.
var (
	// ErrNotFound: the instance does not exist. Get returns it for a
	// missing instance; Delete never does (missing is success).
	ErrNotFound = errors.New("instance not found")
	// ErrQuotaExceeded: the provider refuses for lack of quota or capacity.
	// The reconciler waits (slow requeue, no error backoff) and never marks
	// the Proxy Failed.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrPermanent: retrying the same request cannot succeed (invalid spec,
	// missing permission). The reconciler marks the Proxy Failed until its
	// spec changes.
	ErrPermanent = errors.New("permanent failure")
	// ErrTransient: worth retrying with backoff (timeouts, 5xx, conflicts).
	// Also the class of any error that carries no class.
	ErrTransient = errors.New("transient failure")
)

// classes lists the sentinels in the order Class tries them.
var classes = []error{ErrNotFound, ErrQuotaExceeded, ErrPermanent, ErrTransient}

// Class names, as used for the result label of provider metrics.
const (
	ClassNameNotFound      = "not_found"
	ClassNameQuotaExceeded = "quota_exceeded"
	ClassNamePermanent     = "permanent"
	ClassNameTransient     = "transient"
)

// Error is a classified provider error: Class is one of the sentinels, Op the
// operation that failed (one of the Op constants, or empty) and Err the cause.
//
// errors.Is(e, e.Class) is true, and errors.Is/As also see through to Err.
type Error struct {
	Class error
	Op    string
	Err   error
}

// NewError returns an *Error of class with the given op and cause. A class
// that is not one of the sentinels becomes ErrTransient. A nil cause is
// allowed and still yields a non-nil error, so that NotFound(nil) can never
// turn a failure into success by accident.
func NewError(class error, op string, cause error) error {
	if !isSentinel(class) {
		class = ErrTransient
	}
	return &Error{Class: class, Op: op, Err: cause}
}

// NotFound classifies err as ErrNotFound.
func NotFound(err error) error { return NewError(ErrNotFound, "", err) }

// QuotaExceeded classifies err as ErrQuotaExceeded.
func QuotaExceeded(err error) error { return NewError(ErrQuotaExceeded, "", err) }

// Permanent classifies err as ErrPermanent.
func Permanent(err error) error { return NewError(ErrPermanent, "", err) }

// Transient classifies err as ErrTransient.
func Transient(err error) error { return NewError(ErrTransient, "", err) }

// Error reads "op: class: cause", leaving out the empty parts.
func (e *Error) Error() string {
	msg := e.className()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Op != "" {
		msg = e.Op + ": " + msg
	}
	return msg
}

func (e *Error) className() string {
	if e.Class == nil {
		return ErrTransient.Error()
	}
	return e.Class.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the error's class, so errors.Is(err, ErrQuotaExceeded) works on a
// wrapped *Error.
func (e *Error) Is(target error) bool { return target != nil && target == e.Class }

// Class returns the class of err: nil for nil; otherwise the class of the
// outermost *Error in err's chain (so a caller can reclassify by wrapping
// again), else the first sentinel err wraps, else ErrTransient — retrying is
// the safe default for an error nobody classified.
func Class(err error) error {
	if err == nil {
		return nil
	}
	if c := explicitClass(err); c != nil {
		return c
	}
	return ErrTransient
}

// IsClassified reports whether err carries a class explicitly (an *Error or a
// wrapped sentinel) rather than falling back to ErrTransient. The contract
// suite requires it of every error a provider returns.
func IsClassified(err error) bool { return explicitClass(err) != nil }

func explicitClass(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && isSentinel(e.Class) {
		return e.Class
	}
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// ClassName returns the metrics name of err's class ("not_found",
// "quota_exceeded", "permanent", "transient"), or "" for nil.
func ClassName(err error) string {
	switch Class(err) {
	case nil:
		return ""
	case ErrNotFound:
		return ClassNameNotFound
	case ErrQuotaExceeded:
		return ClassNameQuotaExceeded
	case ErrPermanent:
		return ClassNamePermanent
	default:
		return ClassNameTransient
	}
}

// IsNotFound reports whether err's class is ErrNotFound. Exactly one of the
// Is… helpers is true for a non-nil error; all are false for nil.
func IsNotFound(err error) bool { return Class(err) == ErrNotFound }

// IsQuotaExceeded reports whether err's class is ErrQuotaExceeded.
func IsQuotaExceeded(err error) bool { return Class(err) == ErrQuotaExceeded }

// IsPermanent reports whether err's class is ErrPermanent.
func IsPermanent(err error) bool { return Class(err) == ErrPermanent }

// IsTransient reports whether err's class is ErrTransient, including errors
// that carry no class.
func IsTransient(err error) bool { return Class(err) == ErrTransient }

func isSentinel(err error) bool {
	for _, c := range classes {
		if err == c {
			return true
		}
	}
	return false
}

// IncompleteListError is the cause of the error ListByTag returns, together
// with the instances it could read, when some scopes did not answer.
// Instances in those scopes may exist and are missing from the listing.
type IncompleteListError struct {
	// Unreachable are the scopes not read, sorted, in Instance.Scope's
	// vocabulary.
	Unreachable []string
}

func (e *IncompleteListError) Error() string {
	return fmt.Sprintf("listing incomplete: unreachable %s", strings.Join(e.Unreachable, ", "))
}

// Incomplete returns the ErrTransient-class error of a listing that could not
// read scopes (sorted and deduplicated into the error).
func Incomplete(scopes []string) error {
	s := slices.Compact(slices.Sorted(slices.Values(scopes)))
	return NewError(ErrTransient, OpList, &IncompleteListError{Unreachable: s})
}

// UnreachableScopes returns the scopes of an incomplete listing and true when
// err carries an *IncompleteListError; nil and false otherwise (a nil error,
// or a listing that failed as a whole).
func UnreachableScopes(err error) ([]string, bool) {
	var e *IncompleteListError
	if errors.As(err, &e) {
		return slices.Clone(e.Unreachable), true
	}
	return nil, false
}

// IsIncompleteList reports whether err is the error of a partial listing.
func IsIncompleteList(err error) bool {
	_, ok := UnreachableScopes(err)
	return ok
}
