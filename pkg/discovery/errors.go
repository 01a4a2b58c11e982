package discovery

import (
	"encoding/json"
	"fmt"
	"net/http"

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

func writeRequestError(w http.ResponseWriter, e *RequestError) {
	body := wire.Error{Error: e.Code, Message: e.Message}
	if e.Code == wire.CodeTTLTooLong {
		body.MaxTTLSeconds = &e.MaxTTLSeconds
	}
	writeJSON(w, http.StatusBadRequest, body)
}
