package plainjson

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// AppendString appends s quoted, exactly as encoding/json writes it (with
// its HTML escaping). Printable ASCII other than what encoding/json escapes
// (the quote, the backslash, and <, > and & as HTML escaping does) is
// copied; any other string is written by encoding/json itself, so that its
// escaping rules stay the one source.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			quoted, err := json.Marshal(s)
			if err != nil { // unreachable: every Go string encodes
				return strconv.AppendQuote(b, s)
			}
			return append(b, quoted...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendStringMap appends m with its keys sorted, as encoding/json does.
func AppendStringMap(b []byte, m map[string]string) []byte {
	var stack [16]string
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, k)
		b = append(b, ':')
		b = AppendString(b, m[k])
	}
	return append(b, '}')
}

// AppendTime appends t as time.Time's MarshalJSON writes it (RFC 3339 with
// nanoseconds), or reports false, having appended nothing, for a time that
// has no such form (a year outside [0,9999]), which MarshalJSON refuses.
func AppendTime(b []byte, t time.Time) ([]byte, bool) {
	out, err := t.AppendText(append(b, '"'))
	if err != nil {
		return b, false
	}
	return append(out, '"'), true
}

// Fields appends the members of one JSON object, a comma before all but the
// first: start with Fields{B: append(b, '{')}, end with append(f.B, '}').
type Fields struct {
	B     []byte
	count int
}

// Key starts member name, a constant of printable ASCII that needs no
// escaping.
func (f *Fields) Key(name string) {
	if f.count > 0 {
		f.B = append(f.B, ',')
	}
	f.count++
	f.B = append(f.B, '"')
	f.B = append(f.B, name...)
	f.B = append(f.B, '"', ':')
}

// String appends a string member; omitempty leaves out "".
func (f *Fields) String(name, v string, omitempty bool) {
	if omitempty && v == "" {
		return
	}
	f.Key(name)
	f.B = AppendString(f.B, v)
}

// Int appends an integer member; omitempty leaves out 0.
func (f *Fields) Int(name string, v int64, omitempty bool) {
	if omitempty && v == 0 {
		return
	}
	f.Key(name)
	f.B = strconv.AppendInt(f.B, v, 10)
}

// Uint appends an unsigned integer member; omitempty leaves out 0.
func (f *Fields) Uint(name string, v uint64, omitempty bool) {
	if omitempty && v == 0 {
		return
	}
	f.Key(name)
	f.B = strconv.AppendUint(f.B, v, 10)
}

// Bool appends a boolean member; omitempty leaves out false.
func (f *Fields) Bool(name string, v, omitempty bool) {
	if omitempty && !v {
		return
	}
	f.Key(name)
	f.B = strconv.AppendBool(f.B, v)
}

// StringMap appends a map[string]string member with omitempty (nil and
// empty maps are left out).
func (f *Fields) StringMap(name string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	f.Key(name)
	f.B = AppendStringMap(f.B, m)
}
