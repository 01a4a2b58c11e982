package plainjson

import (
	"math"
	"slices"
)

// Scanner reads the plain subset of JSON: objects whose keys and string
// values are printable ASCII without escapes, integers without fraction or
// exponent, and null. Every method reports false on anything else (and on
// an object that repeats a key, or has more than MaxKeys), leaving the
// Scanner's position undefined: the caller then decodes the whole input
// with the strict decoder instead.
type Scanner struct {
	b []byte
	i int
}

// NewScanner scans b.
func NewScanner(b []byte) Scanner { return Scanner{b: b} }

// MaxKeys bounds the keys of an object the Scanner reads, so that finding a
// repeated one stays cheap; a larger object is the strict decoder's.
const MaxKeys = 40

func (s *Scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c after optional space.
func (s *Scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// End reports whether only space follows.
func (s *Scanner) End() bool {
	s.space()
	return s.i == len(s.b)
}

// String reads a string of printable ASCII with no escapes.
func (s *Scanner) String() (string, bool) {
	if !s.next('"') {
		return "", false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return string(s.b[start : s.i-1]), true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
	}
	return "", false
}

// maxDigits: an integer of at most 18 digits fits in an int64 whatever
// they are; a longer one is the strict decoder's.
const maxDigits = 18

// Int reads a JSON integer (no fraction or exponent) in [lo, hi].
func (s *Scanner) Int(lo, hi int64) (int64, bool) {
	s.space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var v int64
	for ; s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9'; s.i++ {
		if s.i-start == maxDigits {
			return 0, false
		}
		v = v*10 + int64(s.b[s.i]-'0')
	}
	digits := s.i - start
	if digits == 0 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) {
		if c := s.b[s.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	if neg {
		v = -v
	}
	if v < lo || v > hi {
		return 0, false
	}
	return v, true
}

// Null reads the literal null.
func (s *Scanner) Null() bool {
	s.space()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// Object reads an object, calling member for each key with the Scanner at
// its value (member reads the value, or reports false for a key it does
// not take); a repeated key, which a strict decoder refuses or resolves by
// rules of its own, fails.
func (s *Scanner) Object(member func(key string) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	var seen [8]string
	keys := seen[:0]
	for {
		key, ok := s.String()
		if !ok || len(keys) == MaxKeys || slices.Contains(keys, key) || !s.next(':') || !member(key) {
			return false
		}
		keys = append(keys, key)
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// StringMap reads an object of strings into a new map at *m (non-nil even
// when empty, as encoding/json makes it).
func (s *Scanner) StringMap(m *map[string]string) bool {
	*m = map[string]string{}
	return s.Object(func(key string) bool {
		v, ok := s.String()
		(*m)[key] = v
		return ok
	})
}

// SetString reads a string into *dst.
func (s *Scanner) SetString(dst *string) bool {
	v, ok := s.String()
	*dst = v
	return ok
}

// SetInt32 reads an integer that fits in an int32 into *dst.
func (s *Scanner) SetInt32(dst *int32) bool {
	v, ok := s.Int(math.MinInt32, math.MaxInt32)
	*dst = int32(v)
	return ok
}

// SetInt64 reads an integer into *dst.
func (s *Scanner) SetInt64(dst *int64) bool {
	v, ok := s.Int(math.MinInt64, math.MaxInt64)
	*dst = v
	return ok
}
