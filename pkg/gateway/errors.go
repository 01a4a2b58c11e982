package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// Reasons are the "error" field of the gateway's own answers (docs/gateway.md).
const (
	// 407: no Proxy-Authorization, or the lease API refused its token.
	ReasonUnauthorized = "unauthorized"
	// 400: the username's options or the request's form are wrong.
	ReasonInvalid = "invalid_request"
	// 403: the token may not lease as asked (a namespace, a priority).
	ReasonForbidden = "forbidden"
	// 429: no proxy is free for this host now (all leased or cooling), or
	// the wait queue is full, or too many sessions or tunnels; Retry-After.
	ReasonBusy = "busy"
	// 503: no replica serves leases now (a failover); Retry-After.
	ReasonUnavailable = "unavailable"
	// 502: the leased proxy or the site failed the request.
	ReasonUpstream = "upstream_failed"
)

// Error is an answer of the gateway's own.
type Error struct {
	Reason  string
	Message string
	// RetryAfter, when set, is sent as Retry-After.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Reason + ": " + e.Message }

// IsBusy reports whether err is a 429 of the gateway's.
func IsBusy(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == ReasonBusy
}

// defaultRetryAfter is what a busy or unavailable answer says when the API
// said nothing.
const defaultRetryAfter = time.Second

// gatewayError is err in the gateway's vocabulary: its own errors as they
// are, the lease API's mapped by code, anything else (the API unreachable)
// unavailable.
func gatewayError(err error) *Error {
	var ge *Error
	if errors.As(err, &ge) {
		return ge
	}
	var ae *client.APIError
	if errors.As(err, &ae) {
		retry := max(ae.RetryAfter, defaultRetryAfter)
		switch ae.Code {
		case wire.CodeUnauthorized:
			return &Error{Reason: ReasonUnauthorized, Message: "the lease API refused the token (the Proxy-Authorization password)"}
		case wire.CodeForbidden:
			return &Error{Reason: ReasonForbidden, Message: ae.Message}
		case wire.CodeInvalidRequest, wire.CodeInvalidJSON, wire.CodeTTLTooLong, wire.CodeInvalidQuery:
			return &Error{Reason: ReasonInvalid, Message: ae.Message}
		case wire.CodeNoMatch:
			return &Error{Reason: ReasonBusy, Message: "no proxy is free for this request: " + noMatchWords(ae.NoMatch), RetryAfter: retry}
		case wire.CodeQueueFull:
			return &Error{Reason: ReasonBusy, Message: "the wait queue is full: " + ae.Message, RetryAfter: retry}
		case wire.CodeNotLeader, wire.CodeUnavailable:
			return &Error{Reason: ReasonUnavailable, Message: "no replica serves leases now: " + ae.Message, RetryAfter: retry}
		}
		return &Error{Reason: ReasonUnavailable, Message: "the lease API answered " + ae.Error(), RetryAfter: retry}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Reason: ReasonUnavailable, Message: "the request ended before a lease was granted"}
	}
	return &Error{Reason: ReasonUnavailable, Message: fmt.Sprintf("the lease API is unreachable: %v", err), RetryAfter: defaultRetryAfter}
}

func noMatchWords(n *client.NoMatch) string {
	if n == nil {
		return "every matching proxy is leased or cooling"
	}
	if n.SitePolicy != "" {
		return fmt.Sprintf("the site's budget (SitePolicy %q) is in use", n.SitePolicy)
	}
	return fmt.Sprintf("%d considered: %d at capacity, %d cooling down for this host, %d unhealthy", n.Considered, n.AtCapacity, n.InCooldown, n.Unhealthy)
}

// statusOf is the HTTP status of each reason: the one place they are mapped.
func statusOf(reason string) int {
	switch reason {
	case ReasonUnauthorized:
		return http.StatusProxyAuthRequired
	case ReasonInvalid:
		return http.StatusBadRequest
	case ReasonForbidden:
		return http.StatusForbidden
	case ReasonBusy:
		return http.StatusTooManyRequests
	case ReasonUpstream:
		return http.StatusBadGateway
	default:
		return http.StatusServiceUnavailable
	}
}

// body is the JSON of every answer of the gateway's own.
type body struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	LeaseID string `json:"leaseID,omitempty"`
}

// writeError answers err (with the lease's ID when one was held).
func writeError(w http.ResponseWriter, err *Error, leaseID string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if err.Reason == ReasonUnauthorized {
		h.Set("Proxy-Authenticate", `Basic realm="proxy-operator"`)
	}
	if err.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((err.RetryAfter+time.Second-1)/time.Second)))
	}
	if leaseID != "" {
		h.Set(LeaseIDHeader, leaseID)
	}
	w.WriteHeader(statusOf(err.Reason))
	b, _ := json.Marshal(body{Error: err.Reason, Message: err.Message, LeaseID: leaseID})
	_, _ = w.Write(append(b, '\n'))
}

// upstreamDialError is the answer when the leased proxy at addr could not
// be reached, or may not be: an address the dial policy denies (a Proxy's
// endpoint pointed at the API server, instance metadata) is said so.
func upstreamDialError(addr string, err error) *Error {
	if denied, ok := dialpolicy.IsDenied(err); ok {
		return &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("the leased proxy %s is at %s, an address the operator may not dial (--health-denied-cidrs, the API server)", addr, denied)}
	}
	return &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("the leased proxy %s is unreachable: %v", addr, err)}
}
