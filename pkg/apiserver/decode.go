package apiserver

import (
	"fmt"
	"math"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// decode decodes body into into (whose TypeMeta is tm) as the generic
// server's strict JSON serializer does, and fails unless the body is the kind
// into is. A body of the plain shape client-go sends is read by a scanner
// that knows the two types (reflective decoding was a tenth of this server's
// CPU); anything else — escapes, non-ASCII, unknown or repeated keys, other
// value types — is decoded by the strict decoder the serializer uses.
//
// The serializer parses a body twice, once leniently only to read its kind
// and apiVersion. A strict decode that succeeds has matched every key exactly
// once and case-sensitively, so tm then holds what that first parse would
// have read, and the serializer's rules are applied to it: kind and version
// default from into's first registered kind, and the result must be one of
// into's kinds (another would decode into another type).
// TestLeanPathDecodesAsTheSerializer holds it to the serializer.
func (p *leanPath) decode(body []byte, into runtime.Object, tm *metav1.TypeMeta) error {
	if !scanPlain(body, into) {
		if err := decodeStrict(body, into); err != nil {
			return err
		}
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return err
	}
	kinds, _, err := p.typer.ObjectKinds(into)
	if err != nil {
		return err
	}
	actual, defaults := gv.WithKind(tm.Kind), kinds[0]
	if actual.Kind == "" {
		actual.Kind = defaults.Kind
	}
	if actual.Version == "" && (actual.Group == "" || actual.Group == defaults.Group) {
		actual.Group, actual.Version = defaults.Group, defaults.Version
	}
	if !slices.Contains(kinds, actual) {
		return fmt.Errorf("the body is a %s, not a %T", actual, into)
	}
	return nil
}

// decodeStrict is the serializer's strict decoding.
func decodeStrict(body []byte, into runtime.Object) error {
	strictErrs, err := kjson.UnmarshalStrict(body, into)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return runtime.NewStrictDecodingError(strictErrs)
	}
	return nil
}

// scanPlain decodes a plain body into a new ProxyLease or DeleteOptions and
// reports true, or reports false with into left as it was.
func scanPlain(body []byte, into runtime.Object) bool {
	s := scanner{b: body}
	switch obj := into.(type) {
	case *leasingv1alpha1.ProxyLease:
		var pl leasingv1alpha1.ProxyLease
		if s.proxyLease(&pl) && s.end() {
			*obj = pl
			return true
		}
	case *metav1.DeleteOptions:
		var opts metav1.DeleteOptions
		if s.object(func(key string) bool { return s.typeMeta(key, &opts.TypeMeta) }) && s.end() {
			*obj = opts
			return true
		}
	}
	return false
}

// scanner reads the plain subset of JSON: objects whose keys and string
// values are printable ASCII without escapes, and integers. Every method
// reports false on anything else.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
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
func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end: only space follows.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// str reads a string of printable ASCII with no escapes.
func (s *scanner) str() (string, bool) {
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

// int32 reads a JSON integer (no fraction or exponent) that fits in int32.
func (s *scanner) int32() (int32, bool) {
	s.space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var v int64
	for ; s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9'; s.i++ {
		if v = v*10 + int64(s.b[s.i]-'0'); v > math.MaxInt32+1 {
			return 0, false
		}
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
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, false
	}
	return int32(v), true
}

// null reads the literal null.
func (s *scanner) null() bool {
	s.space()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// maxPlainKeys bounds the keys of a plain object, so that finding repeated
// ones stays cheap; a larger object is the strict decoder's.
const maxPlainKeys = 40

// object reads an object, calling member for each key with the scanner at
// its value; a repeated key, which strict decoding refuses, fails.
func (s *scanner) object(member func(key string) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	var seen [8]string
	keys := seen[:0]
	for {
		key, ok := s.str()
		if !ok || len(keys) == maxPlainKeys || slices.Contains(keys, key) || !s.next(':') || !member(key) {
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

// stringMap reads a map of strings into *m (made here: the key was not seen).
func (s *scanner) stringMap(m *map[string]string) bool {
	*m = map[string]string{}
	return s.object(func(key string) bool {
		v, ok := s.str()
		(*m)[key] = v
		return ok
	})
}

// setStr reads a string into *dst.
func (s *scanner) setStr(dst *string) bool {
	v, ok := s.str()
	*dst = v
	return ok
}

func (s *scanner) setInt32(dst *int32) bool {
	v, ok := s.int32()
	*dst = v
	return ok
}

func (s *scanner) typeMeta(key string, tm *metav1.TypeMeta) bool {
	switch key {
	case "kind":
		return s.setStr(&tm.Kind)
	case "apiVersion":
		return s.setStr(&tm.APIVersion)
	}
	return false
}

func (s *scanner) proxyLease(pl *leasingv1alpha1.ProxyLease) bool {
	return s.object(func(key string) bool {
		switch key {
		case "metadata":
			return s.objectMeta(&pl.ObjectMeta)
		case "spec":
			return s.spec(&pl.Spec)
		case "status":
			// Status is the server's: only an empty one is plain.
			return s.object(func(string) bool { return false })
		}
		return s.typeMeta(key, &pl.TypeMeta)
	})
}

func (s *scanner) objectMeta(m *metav1.ObjectMeta) bool {
	return s.object(func(key string) bool {
		switch key {
		case "name":
			return s.setStr(&m.Name)
		case "generateName":
			return s.setStr(&m.GenerateName)
		case "namespace":
			return s.setStr(&m.Namespace)
		case "labels":
			return s.stringMap(&m.Labels)
		case "annotations":
			return s.stringMap(&m.Annotations)
		case "creationTimestamp":
			// Older clients send null for the zero time.
			return s.null()
		}
		return false
	})
}

func (s *scanner) spec(sp *leasingv1alpha1.ProxyLeaseSpec) bool {
	return s.object(func(key string) bool {
		switch key {
		case "selector":
			return s.stringMap(&sp.Selector)
		case "target":
			return s.setStr(&sp.Target)
		case "ttlSeconds":
			sp.TTLSeconds = new(int32)
			return s.setInt32(sp.TTLSeconds)
		case "waitSeconds":
			return s.setInt32(&sp.WaitSeconds)
		case "priority":
			return s.setInt32(&sp.Priority)
		}
		return false
	})
}
