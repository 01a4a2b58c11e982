package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/plainjson"
)

// maxFlowLen bounds the flow suffix, this API's own field. The selector,
// namespace and target are the leasing Service's to check (leasing.Request),
// the same for both lease APIs.
const maxFlowLen = 128

// decodeStrict decodes exactly one JSON object into v: unknown fields,
// wrong types, anything but an object, and trailing data are errors. An
// empty body decodes as {} when allowEmpty.
func decodeStrict(data []byte, v any, allowEmpty bool) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest(wire.CodeInvalidJSON, "the body must be a JSON object")
	}
	if trimmed[0] != '{' {
		return badRequest(wire.CodeInvalidJSON, "the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest(wire.CodeInvalidJSON, "%s", describeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest(wire.CodeInvalidJSON, "unexpected data after the JSON object")
	}
	return nil
}

func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return fmt.Sprintf("field %s: %s is not a valid %s", field, typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// DecodeAcquireRequest decodes and checks a POST /v1/leases body (empty =
// {}). Errors are *RequestError. The selector, namespace and target, and the
// bounds of ttlSeconds and waitSeconds, are the leasing Service's to check.
func DecodeAcquireRequest(data []byte) (wire.AcquireRequest, error) {
	var req wire.AcquireRequest
	if !scanPlain(data, &req, acquireMember) {
		if err := decodeStrict(data, &req, true); err != nil {
			return req, err
		}
	}
	return req, ValidateAcquireRequest(req)
}

// scanPlain decodes a plain body (plainjson's subset: what clients send)
// into *v with member, without reflection, and reports true; or reports
// false with *v as it was, and decodeStrict decodes the body instead. A
// strict decode that succeeds on a plain body matched each key once and
// exactly (an inexact case, a repeat or an unknown key is not plain), so
// the two agree on every body the scan takes (FuzzDecodeIsTheStrictDecoders).
func scanPlain[T any](data []byte, v *T, member func(s *plainjson.Scanner, v *T, key string) bool) bool {
	var out T
	s := plainjson.NewScanner(data)
	if !s.Object(func(key string) bool { return member(&s, &out, key) }) || !s.End() {
		return false
	}
	*v = out
	return true
}

func acquireMember(s *plainjson.Scanner, req *wire.AcquireRequest, key string) bool {
	switch key {
	case "selector":
		return s.StringMap(&req.Selector)
	case "namespace":
		return s.SetString(&req.Namespace)
	case "target":
		return s.SetString(&req.Target)
	case "ttlSeconds":
		return s.SetInt64(&req.TTLSeconds)
	case "waitSeconds":
		return s.SetInt64(&req.WaitSeconds)
	case "flow":
		return s.SetString(&req.Flow)
	case "priority":
		return s.SetInt32(&req.Priority)
	}
	return false
}

func reportMember(s *plainjson.Scanner, req *wire.ReportRequest, key string) bool {
	switch key {
	case "result":
		return s.SetString(&req.Result)
	case "target":
		return s.SetString(&req.Target)
	}
	return false
}

func renewMember(s *plainjson.Scanner, req *wire.RenewRequest, key string) bool {
	return key == "ttlSeconds" && s.SetInt64(&req.TTLSeconds)
}

// ValidateAcquireRequest checks the field of an acquire request that is
// this API's own: the flow suffix.
func ValidateAcquireRequest(req wire.AcquireRequest) error {
	return validateText("flow", req.Flow, maxFlowLen)
}

// validateText: valid UTF-8, no control characters, at most max bytes.
func validateText(field, s string, max int) error {
	switch {
	case len(s) > max:
		return badRequest(wire.CodeInvalidRequest, "%s is %d bytes, at most %d allowed", field, len(s), max)
	case !utf8.ValidString(s):
		return badRequest(wire.CodeInvalidRequest, "%s is not valid UTF-8", field)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return badRequest(wire.CodeInvalidRequest, "%s contains control characters", field)
	}
	return nil
}

// DecodeReportRequest decodes a POST /v1/leases/{id}/report body. The result
// and the target are the leasing Service's to check (400 invalid_result,
// invalid_request), so an empty or unknown result passes here.
func DecodeReportRequest(data []byte) (wire.ReportRequest, error) {
	var req wire.ReportRequest
	if !scanPlain(data, &req, reportMember) {
		if err := decodeStrict(data, &req, false); err != nil {
			return req, err
		}
	}
	return req, validateReport(req)
}

// validateReport checks what of a report this API checks itself: the
// result's text, which the leasing Service then checks against the results.
func validateReport(req wire.ReportRequest) error {
	return validateText("result", req.Result, 64)
}

// DecodeRenewRequest decodes a POST /v1/leases/{id}/renew body (empty = {}).
func DecodeRenewRequest(data []byte) (wire.RenewRequest, error) {
	var req wire.RenewRequest
	if scanPlain(data, &req, renewMember) {
		return req, nil
	}
	return req, decodeStrict(data, &req, true)
}
