package plainjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/plainjson/plainjsontest"

	"github.com/google/go-cmp/cmp"
)

func TestAppendStringIsEncodingJSONs(t *testing.T) {
	for _, s := range plainjsontest.TrickyStrings() {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("AppendString(%q) = %s, encoding/json writes %s", s, got[1:], want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range plainjsontest.TrickyStrings() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	})
}

// A struct with every kind of member Fields writes, as encoding/json and as
// Fields write it.
type allKinds struct {
	S  string            `json:"s"`
	SO string            `json:"so,omitempty"`
	I  int64             `json:"i"`
	IO int64             `json:"io,omitempty"`
	U  uint64            `json:"u,omitempty"`
	B  bool              `json:"b"`
	BO bool              `json:"bo,omitempty"`
	M  map[string]string `json:"m,omitempty"`
	T  time.Time         `json:"t"`
}

func appendAllKinds(b []byte, v *allKinds) ([]byte, bool) {
	f := Fields{B: append(b, '{')}
	f.String("s", v.S, false)
	f.String("so", v.SO, true)
	f.Int("i", v.I, false)
	f.Int("io", v.IO, true)
	f.Uint("u", v.U, true)
	f.Bool("b", v.B, false)
	f.Bool("bo", v.BO, true)
	f.StringMap("m", v.M)
	f.Key("t")
	var ok bool
	if f.B, ok = AppendTime(f.B, v.T); !ok {
		return b, false
	}
	return append(f.B, '}'), true
}

func TestFieldsWriteWhatEncodingJSONWrites(t *testing.T) {
	zone := time.FixedZone("odd", 5*3600+1800+7)
	for i, v := range []allKinds{
		{},
		{S: "<a>", SO: "b", I: -1, IO: math.MaxInt64, U: math.MaxUint64, B: true, BO: true,
			M: map[string]string{"z": "1", "a": "\u2028", "\xff": ""}, T: time.Unix(1700000000, 123456789).In(zone)},
		{M: map[string]string{}, T: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{T: time.Date(0, 1, 1, 0, 0, 0, 1, time.FixedZone("west", -(23*3600+59*60)))},
	} {
		want, err := json.Marshal(&v)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := appendAllKinds(nil, &v); !ok || !bytes.Equal(got, want) {
			t.Errorf("%d: Fields wrote (%v)\n%s\nencoding/json\n%s", i, ok, got, want)
		}
	}
}

// AppendTime refuses exactly the times MarshalJSON refuses, and appends
// nothing for them.
func TestAppendTimeRefusesWhatMarshalJSONRefuses(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		want, err := tm.MarshalJSON()
		got, ok := AppendTime([]byte("x"), tm)
		switch {
		case ok != (err == nil):
			t.Errorf("%v: AppendTime ok=%v, MarshalJSON error %v", tm, ok, err)
		case !ok && string(got) != "x":
			t.Errorf("%v: a refused time appended %q", tm, got)
		case ok && !bytes.Equal(got, append([]byte("x"), want...)):
			t.Errorf("%v: AppendTime %s, MarshalJSON %s", tm, got[1:], want)
		}
	}
}

// plain is what the scanner tests decode: a string, two integer widths and
// a string map.
type plain struct {
	S   string            `json:"s"`
	I32 int32             `json:"i32"`
	I64 int64             `json:"i64"`
	M   map[string]string `json:"m"`
	// N takes null only.
	N *int `json:"null"`
}

func scanPlain(b []byte) (plain, bool) {
	var p plain
	s := NewScanner(b)
	ok := s.Object(func(key string) bool {
		switch key {
		case "s":
			return s.SetString(&p.S)
		case "i32":
			return s.SetInt32(&p.I32)
		case "i64":
			return s.SetInt64(&p.I64)
		case "m":
			return s.StringMap(&p.M)
		case "null":
			return s.Null()
		}
		return false
	}) && s.End()
	return p, ok
}

func strictPlain(b []byte) (plain, error) {
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return p, errors.New("data after the object")
	}
	return p, nil
}

// scanMismatch is "" when the scanner agrees with the strict decoder on b:
// what it takes, the decoder takes with the same result. What it refuses
// is not checked (that input goes to the decoder).
func scanMismatch(scan func([]byte) (plain, bool), b []byte) string {
	got, ok := scan(b)
	if !ok {
		return ""
	}
	want, err := strictPlain(b)
	if err != nil {
		return "scanned " + string(b) + ", the decoder refuses it: " + err.Error()
	}
	if d := cmp.Diff(want, got); d != "" {
		return "scanned " + string(b) + " (-decoder +scanner):\n" + d
	}
	return ""
}

var scanCases = []struct {
	in   string
	scan bool
}{
	{`{}`, true},
	{` { "s" : "a b" , "i32":-7,"i64":123456789012345678 } `, true},
	{`{"m":{}}`, true},
	{`{"m":{"a":"1","b":""}}`, true},
	{`{"i32":2147483647}`, true},
	{`{"i32":2147483648}`, false},
	{`{"i32":-2147483649}`, false},
	{`{"i64":1234567890123456789}`, false}, // 19 digits: the decoder's
	{`{"i32":1.0}`, false},
	{`{"i32":1e3}`, false},
	{`{"i32":01}`, false},
	{`{"i32":-}`, false},
	{`{"s":"\u0041"}`, false},
	{`{"s":"é"}`, false},
	{`{"s":null}`, false},
	{`{"S":"a"}`, false}, // the decoder matches keys case-insensitively
	{`{"s":"a","s":"b"}`, false},
	{`{"x":1}`, false},
	{`{"s":"a"} {}`, false},
	{`{"s":"a",}`, false},
	{`{"s":"a"`, false},
	{`{"m":{"a":1}}`, false},
	{`[]`, false},
	{`{"null":null}`, true},
	{``, false},
}

func TestScannerTakesPlainInputAsTheDecoderDoes(t *testing.T) {
	for _, c := range scanCases {
		if _, ok := scanPlain([]byte(c.in)); ok != c.scan {
			t.Errorf("scan %s: %v, want %v", c.in, ok, c.scan)
		}
		if m := scanMismatch(scanPlain, []byte(c.in)); m != "" {
			t.Error(m)
		}
	}
}

// Negative control: the comparison catches a scanner that reads a value
// differently from the decoder (here, lowercased).
func TestScanMismatchCatchesABrokenScanner(t *testing.T) {
	lower := func(b []byte) (plain, bool) { return scanPlain(bytes.ToLower(b)) }
	if scanMismatch(lower, []byte(`{"s":"A"}`)) == "" {
		t.Error("a scanner that lowercases values passed the comparison")
	}
}

func FuzzScanner(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c.in))
	}
	f.Add([]byte(strings.Repeat(`{"m":`, 3)))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m := scanMismatch(scanPlain, b); m != "" {
			t.Fatal(m)
		}
	})
}
