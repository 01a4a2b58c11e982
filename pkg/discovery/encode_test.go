package discovery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/plainjson/plainjsontest"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/randfill"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// leaseFiller fills every field of a wire.Lease: tricky strings a third of
// the time, times in other zones, out of RFC 3339's range or zero, nil and
// empty maps, integers of either sign.
func leaseFiller(seed int64) *randfill.Filler {
	zones := []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+1800+7), time.FixedZone("far", 25*3600)}
	return randfill.NewWithSeed(seed).NilChance(0.25).NumElements(0, 6).Funcs(
		plainjsontest.FillString,
		func(t *time.Time, c randfill.Continue) {
			switch c.Intn(6) {
			case 0:
				*t = time.Time{}
			case 1:
				*t = time.Date(10000+c.Intn(10), 1, 1, 0, 0, 0, 0, time.UTC)
			default:
				*t = time.Unix(c.Int63n(4e9), c.Int63n(1e9)).In(zones[c.Intn(len(zones))])
			}
		},
		func(i *int64, c randfill.Continue) { *i = (c.Int63n(3) - 1) * c.Int63() },
		func(i *int32, c randfill.Continue) { *i = int32(c.Int63n(3)-1) * c.Int31() },
	)
}

// encoderJSON is what writeJSON writes for l: json.Encoder, HTML escaping on.
func encoderJSON(t *testing.T, l *wire.Lease) ([]byte, bool) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(l); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// leaseMismatches encodes n filled leases with enc after a prefix and lists
// how they differ from json.Encoder (and where one refuses what the other
// takes).
func leaseMismatches(t *testing.T, enc func([]byte, *wire.Lease) ([]byte, bool), n int) []string {
	var out []string
	f := leaseFiller(1)
	for i := range n {
		var l wire.Lease
		f.Fill(&l)
		got, ok := enc([]byte("prefix"), &l)
		want, wantOK := encoderJSON(t, &l)
		switch {
		case ok != wantOK:
			out = append(out, fmt.Sprintf("lease %d: encoded %v, the Encoder %v: %+v", i, ok, wantOK, l))
		case !ok && string(got) != "prefix":
			out = append(out, fmt.Sprintf("lease %d: refused, yet appended %q", i, got))
		case ok && !bytes.Equal(got[len("prefix"):], want):
			out = append(out, fmt.Sprintf("lease %d:\n got %s\nwant %s", i, got[len("prefix"):], want))
		}
	}
	return out
}

// The hand encoder writes what json.Encoder writes, for leases with every
// field set in every way, and refuses what it refuses.
func TestLeaseJSONIsEncodingJSONs(t *testing.T) {
	if d := leaseMismatches(t, appendLeaseJSON, 3000); len(d) > 0 {
		t.Errorf("%d of 3000 differ from json.Encoder; first:\n%s", len(d), d[0])
	}
}

// Negative control: the comparison catches an encoder that differs in one
// rule only (here, proxyDraining without omitempty).
func TestLeaseJSONCheckCatchesADifference(t *testing.T) {
	alwaysDraining := func(b []byte, l *wire.Lease) ([]byte, bool) {
		out, ok := appendLeaseJSON(b, l)
		if ok && !l.ProxyDraining {
			out = bytes.Replace(out, []byte(`,"expiresAt"`), []byte(`,"proxyDraining":false,"expiresAt"`), 1)
		}
		return out, ok
	}
	if d := leaseMismatches(t, alwaysDraining, 300); len(d) == 0 {
		t.Error("an encoder that always writes proxyDraining passed the comparison")
	}
}

// The bodies the clients send (Go, Python, Scrapy, examples, the docs) take
// the fast path; were they not, FuzzDecodeIsTheStrictDecoders would check
// nothing.
func TestClientBodiesArePlain(t *testing.T) {
	for _, body := range []string{
		`{}`,
		`{"selector":{"zone":"z1"},"ttlSeconds":60}`,
		`{"namespace":"crawl","selector":{"region":"eu","tier":"gold"},"target":"example.com","ttlSeconds":300,"waitSeconds":30,"flow":"batch","priority":-2}`,
		"{\n  \"target\": \"example.com\"\n}\n",
	} {
		var req wire.AcquireRequest
		if !scanPlain([]byte(body), &req, acquireMember) {
			t.Errorf("acquire body %s is not plain", body)
		}
	}
	var rep wire.ReportRequest
	if !scanPlain([]byte(`{"result":"rate_limited","target":"example.com"}`), &rep, reportMember) {
		t.Error("the report body is not plain")
	}
	var ren wire.RenewRequest
	if !scanPlain([]byte(`{"ttlSeconds":120}`), &ren, renewMember) {
		t.Error("the renew body is not plain")
	}
}

// decodeMismatch is "" when fast (the decoder with its plain path) and
// strict (decodeStrict alone) agree on data: the same value, or the same
// error.
func decodeMismatch[T any](data []byte, fast func([]byte) (T, error), strict func([]byte) (T, error)) string {
	got, gotErr := fast(data)
	want, wantErr := strict(data)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		return fmt.Sprintf("%q: error %v, the strict decoder's %v", data, gotErr, wantErr)
	}
	if d := cmp.Diff(want, got); d != "" {
		return fmt.Sprintf("%q (-strict +fast):\n%s", data, d)
	}
	return ""
}

func strictAcquire(data []byte) (wire.AcquireRequest, error) {
	var req wire.AcquireRequest
	if err := decodeStrict(data, &req, true); err != nil {
		return req, err
	}
	return req, ValidateAcquireRequest(req)
}

func strictReport(data []byte) (wire.ReportRequest, error) {
	var req wire.ReportRequest
	if err := decodeStrict(data, &req, false); err != nil {
		return req, err
	}
	return req, validateText("result", req.Result, 64)
}

func strictRenew(data []byte) (wire.RenewRequest, error) {
	var req wire.RenewRequest
	return req, decodeStrict(data, &req, true)
}

var decodeSeeds = []string{
	``, ` `, `{}`, `[]`, `null`, `{"selector":{}}`, `{"selector":null}`, `{"selector":{"a":"1","b":""}}`,
	`{"ttlSeconds":60}`, `{"ttlSeconds":-1}`, `{"ttlSeconds":1.5}`, `{"ttlSeconds":9223372036854775807}`,
	`{"priority":2147483648}`, `{"Target":"x"}`, `{"target":"x","target":"y"}`, `{"target":"\u0041"}`,
	`{"flow":"` + string(bytes.Repeat([]byte("f"), 129)) + `"}`, `{"flow":"a\tb"}`, `{"result":"ok"}`,
	`{"result":"ok","target":"t"}`, `{"result":""}`, `{"x":1}`, `{} {}`, `{"target":"x"`, `{"selector":{"a":1}}`,
}

// The plain path decodes every body as decodeStrict alone does: the same
// request or the same error, for the three request bodies.
func TestDecodeIsTheStrictDecoders(t *testing.T) {
	for _, s := range decodeSeeds {
		for _, m := range []string{
			decodeMismatch([]byte(s), DecodeAcquireRequest, strictAcquire),
			decodeMismatch([]byte(s), DecodeReportRequest, strictReport),
			decodeMismatch([]byte(s), DecodeRenewRequest, strictRenew),
		} {
			if m != "" {
				t.Error(m)
			}
		}
	}
}

// Negative control: the comparison catches a plain path that reads one
// field differently (here, the target lowercased).
func TestDecodeCheckCatchesADifference(t *testing.T) {
	lowered := func(data []byte) (wire.AcquireRequest, error) {
		return DecodeAcquireRequest(bytes.ToLower(data))
	}
	if decodeMismatch([]byte(`{"target":"Example.com"}`), lowered, strictAcquire) == "" {
		t.Error("a decoder that lowercases the body passed the comparison")
	}
}

func FuzzDecodeIsTheStrictDecoders(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range []string{
			decodeMismatch(data, DecodeAcquireRequest, strictAcquire),
			decodeMismatch(data, DecodeReportRequest, strictReport),
			decodeMismatch(data, DecodeRenewRequest, strictRenew),
		} {
			if m != "" {
				t.Fatal(m)
			}
		}
	})
}
