package gcp

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/api/googleapi"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// Reasons of Compute Engine error bodies (errors[0].reason) that decide a
// class.
const (
	reasonAlreadyExists     = "alreadyExists"
	reasonResourceNotReady  = "resourceNotReady"
	reasonRateLimitExceeded = "rateLimitExceeded"
	reasonUserRateLimit     = "userRateLimitExceeded"
	reasonQuotaExceeded     = "quotaExceeded"
	reasonPoolExhausted     = "ZONE_RESOURCE_POOL_EXHAUSTED"
	reasonPoolExhaustedMore = "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
)

// classify gives err its provider class, from the googleapi.Error code and
// reason (errors.As sees through the client's apierror wrapper; its gRPC-style
// status is not used: Compute bodies map 409 to Aborted):
//
//	404                                      → NotFound
//	403/429 rateLimitExceeded, quotaExceeded,
//	  userRateLimitExceeded, any 429, a
//	  "Quota '…' exceeded" message, or
//	  ZONE_RESOURCE_POOL_EXHAUSTED           → QuotaExceeded (wait, never Failed)
//	400 resourceNotReady                     → Transient (still being created)
//	other 400, 401, 403                      → Permanent, with the API's message
//	409, 412, 5xx, timeouts, connection
//	  errors, anything else                  → Transient (backoff)
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return provider.NewError(classOfAPIError(ge), op, fmt.Errorf("%s", apiMessage(ge)))
	}
	// Timeouts, cancellations, connection errors and anything else.
	return provider.NewError(provider.ErrTransient, op, err)
}

func classOfAPIError(ge *googleapi.Error) error {
	reason := firstReason(ge)
	switch {
	case ge.Code == 404:
		return provider.ErrNotFound
	case isQuota(ge.Code, reason, ge.Message):
		return provider.ErrQuotaExceeded
	case ge.Code == 400 && reason == reasonResourceNotReady:
		return provider.ErrTransient
	case ge.Code == 400, ge.Code == 401, ge.Code == 403:
		return provider.ErrPermanent
	default:
		return provider.ErrTransient
	}
}

func isQuota(code int, reason, msg string) bool {
	switch reason {
	case reasonRateLimitExceeded, reasonUserRateLimit, reasonQuotaExceeded, reasonPoolExhausted, reasonPoolExhaustedMore:
		return true
	}
	return code == 429 ||
		(strings.Contains(msg, "Quota '") && strings.Contains(msg, "exceeded")) ||
		strings.Contains(msg, reasonPoolExhausted)
}

func firstReason(ge *googleapi.Error) string {
	if len(ge.Errors) > 0 {
		return ge.Errors[0].Reason
	}
	return ""
}

// apiMessage is "<code> <reason>: <message>", what a user needs in a
// condition message.
func apiMessage(ge *googleapi.Error) string {
	msg := ge.Message
	if msg == "" && len(ge.Errors) > 0 {
		msg = ge.Errors[0].Message
	}
	if r := firstReason(ge); r != "" {
		return fmt.Sprintf("compute engine %d %s: %s", ge.Code, r, msg)
	}
	return fmt.Sprintf("compute engine %d: %s", ge.Code, msg)
}

// isAlreadyExists reports a 409 alreadyExists: success for an idempotent
// insert.
func isAlreadyExists(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == 409 && (firstReason(ge) == reasonAlreadyExists || firstReason(ge) == "")
}

// isNotFound reports a 404.
func isNotFound(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == 404
}
