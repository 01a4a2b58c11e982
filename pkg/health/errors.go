package health

import (
	"errors"
	"fmt"
)

// Error classes of a failed probe. Probe errors wrap exactly one of them, so
// callers branch with the Is… helpers instead of matching messages.
var (
	// ErrInvalidTarget: the probe could not be built (unparsable proxy or
	// probe URL, unusable CA bundle). Retrying does not help until the spec
	// changes, but it still counts as a failed probe: an unusable health
	// check must not leave a proxy reported healthy.
	ErrInvalidTarget = errors.New("invalid probe target")
	// ErrTimeout: no response within the health check's timeoutSeconds.
	ErrTimeout = errors.New("probe timed out")
	// ErrUnexpectedStatus: the target answered, with another status than
	// expectedStatus.
	ErrUnexpectedStatus = errors.New("unexpected status")
	// ErrTransport: the request through the proxy failed (proxy refused or
	// reset the connection, CONNECT rejected, TLS handshake failed, ...).
	ErrTransport = errors.New("probe request failed")
)

// StatusError is the error of a probe answered with an unexpected status.
type StatusError struct {
	Got, Want int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: got HTTP %d, want %d", ErrUnexpectedStatus, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrUnexpectedStatus) hold.
func (e *StatusError) Is(target error) bool { return target == ErrUnexpectedStatus }

// IsInvalidTarget reports whether err is an ErrInvalidTarget.
func IsInvalidTarget(err error) bool { return errors.Is(err, ErrInvalidTarget) }

// IsTimeout reports whether err is an ErrTimeout.
func IsTimeout(err error) bool { return errors.Is(err, ErrTimeout) }

// IsUnexpectedStatus reports whether err is an ErrUnexpectedStatus.
func IsUnexpectedStatus(err error) bool { return errors.Is(err, ErrUnexpectedStatus) }

// IsTransport reports whether err is an ErrTransport.
func IsTransport(err error) bool { return errors.Is(err, ErrTransport) }
