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

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// Input limits. Attributes are free-form strings on the Proxy, so selector
// keys and values are bounded by size, not by a syntax.
const (
	maxSelectorPairs = 32
	maxAttrLen       = 256
	maxTargetLen     = 1024
	maxFlowLen       = 128
)

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
// {}). Errors are *RequestError. The bounds of ttlSeconds and waitSeconds are
// the leasing Service's to check.
func DecodeAcquireRequest(data []byte) (wire.AcquireRequest, error) {
	var req wire.AcquireRequest
	if err := decodeStrict(data, &req, true); err != nil {
		return req, err
	}
	return req, ValidateAcquireRequest(req)
}

// ValidateAcquireRequest checks the fields of an acquire request that are
// this API's own (sizes and characters of the selector, target and flow).
func ValidateAcquireRequest(req wire.AcquireRequest) error {
	if err := validateSelector(req.Selector, "selector"); err != nil {
		return err
	}
	if req.Namespace != "" {
		if errs := validation.IsDNS1123Label(req.Namespace); len(errs) > 0 {
			return badRequest(wire.CodeInvalidRequest, "namespace %q: %s", req.Namespace, strings.Join(errs, "; "))
		}
	}
	if err := validateText("target", req.Target, maxTargetLen); err != nil {
		return err
	}
	return validateText("flow", req.Flow, maxFlowLen)
}

func validateSelector(sel map[string]string, field string) error {
	if len(sel) > maxSelectorPairs {
		return badRequest(wire.CodeInvalidRequest, "%s has %d pairs, at most %d allowed", field, len(sel), maxSelectorPairs)
	}
	for k, v := range sel {
		if k == "" {
			return badRequest(wire.CodeInvalidRequest, "%s: empty attribute name", field)
		}
		if err := validateText(field+" key", k, maxAttrLen); err != nil {
			return err
		}
		if err := validateText(field+"["+k+"]", v, maxAttrLen); err != nil {
			return err
		}
	}
	return nil
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
// itself is checked by the store (400 invalid_result), so an empty or
// unknown result passes here.
func DecodeReportRequest(data []byte) (wire.ReportRequest, error) {
	var req wire.ReportRequest
	if err := decodeStrict(data, &req, false); err != nil {
		return req, err
	}
	if err := validateText("result", req.Result, 64); err != nil {
		return req, err
	}
	return req, validateText("target", req.Target, maxTargetLen)
}

// DecodeRenewRequest decodes a POST /v1/leases/{id}/renew body (empty = {}).
func DecodeRenewRequest(data []byte) (wire.RenewRequest, error) {
	var req wire.RenewRequest
	return req, decodeStrict(data, &req, true)
}
