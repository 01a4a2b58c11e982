package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// RequestError is a client mistake found while decoding or validating a
// request: it becomes a 400 with this code and message.
type RequestError struct {
	Code    string
	Message string
	// MaxTTLSeconds is set for wire.CodeTTLTooLong.
	MaxTTLSeconds int64
}

func (e *RequestError) Error() string { return e.Code + ": " + e.Message }

func badRequest(code, format string, args ...any) *RequestError {
	return &RequestError{Code: code, Message: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONHeader(w, status)
	// An encoding error here means the client went away; nothing to do.
	_ = json.NewEncoder(w).Encode(v)
}

// writeJSONHeader starts a JSON answer.
func writeJSONHeader(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, wire.Error{Error: code, Message: message})
}

// answer is a refusal of the lease API as both of its ways out give it: the
// HTTP handlers write it (write), in-process callers get it as the error the
// Go client would have decoded from it (err).
type answer struct {
	status int
	body   wire.Error
	// retryAfter is sent as Retry-After (seconds; 0: none).
	retryAfter int64
	// unauthorized asks for a bearer token (WWW-Authenticate).
	unauthorized bool
	// closeConn ends the connection: its next one may reach another replica.
	closeConn bool
}

func (a *answer) write(w http.ResponseWriter) {
	h := w.Header()
	if a.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(a.retryAfter, 10))
	}
	if a.unauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="proxy-operator"`)
	}
	if a.closeConn {
		h.Set("Connection", "close")
	}
	writeJSON(w, a.status, a.body)
}

// err is the answer as client.Client returns it from the network.
func (a *answer) err() error {
	return client.ErrorOf(a.status, a.body, time.Duration(a.retryAfter)*time.Second)
}

// requestAnswer is a request that failed decoding or this API's own checks:
// a *RequestError says what, anything else is an invalid request.
func requestAnswer(err error) *answer {
	var e *RequestError
	if !errors.As(err, &e) {
		return &answer{status: http.StatusBadRequest, body: wire.Error{Error: wire.CodeInvalidRequest, Message: err.Error()}}
	}
	body := wire.Error{Error: e.Code, Message: e.Message}
	if e.Code == wire.CodeTTLTooLong {
		body.MaxTTLSeconds = &e.MaxTTLSeconds
	}
	return &answer{status: http.StatusBadRequest, body: body}
}
