package checkpoint

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/plainjson/plainjsontest"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/randfill"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// stringCodec stands in for an API's metadata codec: Extra is a string.
type stringCodec struct{}

var _ ExtraCodec = stringCodec{}

func (stringCodec) EncodeExtra(extra any) ([]byte, error) {
	s, ok := extra.(string)
	if !ok {
		return nil, errors.New("not a string")
	}
	return []byte(s), nil
}
func (stringCodec) DecodeExtra(b []byte) (any, error) { return string(b), nil }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sampleState() lease.State {
	key := lease.ProxyKey{Namespace: "crawl", Name: "p1"}
	return lease.State{
		Revision: 42,
		Leases: []lease.Lease{{
			ID: "a", Namespace: "crawl", Name: "named", Holder: "h", Flow: "h", Target: "site", Tier: 1,
			Proxy:      lease.ProxyInfo{Namespace: "crawl", Name: "p1", URL: "http://10.0.0.1:3128", Host: "10.0.0.1", Port: 3128, Attributes: map[string]string{"tier": "gold"}, Healthy: true},
			AcquiredAt: t0, ExpiresAt: t0.Add(time.Hour), TTL: time.Hour, LastResult: "ok", Revision: 41,
			Meta: lease.Metadata{Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"n": "v"}, Extra: "template"},
		}, {
			ID: "b", Namespace: "crawl", Name: "b", Proxy: lease.ProxyInfo{Namespace: "crawl", Name: "p1"}, ExpiresAt: t0.Add(time.Minute),
		}},
		Cooldowns: []lease.Cooldown{{Proxy: key, Target: "site", Until: t0.Add(time.Minute), Holder: "h"}},
		Ended:     []lease.EndedLease{{ID: "c", Name: key, Proxy: key, Target: "t", Holder: "h", Reason: lease.Released, Until: t0.Add(time.Minute)}},
	}
}

func TestFormatRoundTrip(t *testing.T) {
	st := sampleState()
	data, err := (&encoder{}).encode(&st, 777, stringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	got, rvBase, err := decode(data, stringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	if rvBase != 777 {
		t.Errorf("rvBase %d", rvBase)
	}
	if d := cmp.Diff(st, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	if st.Leases[0].Meta.Extra != "template" {
		t.Error("encode changed the caller's state")
	}
	again, _ := (&encoder{}).encode(&st, 777, stringCodec{})
	if !bytes.Equal(data, again) {
		t.Error("the same state encodes differently (a write would happen with nothing changed)")
	}
}

// An encoder reused for a smaller state keeps nothing of the larger one.
func TestEncoderReuse(t *testing.T) {
	enc := &encoder{}
	big := sampleState()
	if _, err := enc.encode(&big, 1, stringCodec{}); err != nil {
		t.Fatal(err)
	}
	small := lease.State{Revision: 50, TakenAt: t0, Leases: []lease.Lease{{ID: "z", Namespace: "other", Name: "z",
		Proxy: lease.ProxyInfo{Namespace: "other", Name: "q"}, ExpiresAt: t0.Add(time.Minute)}}}
	data, err := enc.encode(&small, 2, stringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := decode(data, stringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(small, got); d != "" {
		t.Errorf("second state through a reused encoder (-want +got):\n%s", d)
	}
	fresh, _ := (&encoder{}).encode(&small, 2, stringCodec{})
	if !bytes.Equal(data, fresh) {
		t.Error("a reused encoder writes other bytes than a new one")
	}
}

func TestFormatErrors(t *testing.T) {
	st := sampleState()
	if _, err := (&encoder{}).encode(&st, 1, nil); err == nil || !strings.Contains(err.Error(), "no codec") {
		t.Errorf("metadata without a codec: %v", err)
	}
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.Bytes()
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"not gzip", []byte("plain text, not compressed"), "gzip"},
		{"not JSON", gz("{"), "unexpected end"},
		{"another version", gz(`{"version":2}`), "format version 2"},
		{"metadata and no codec", gz(`{"version":1,"proxies":[{"Namespace":"a","Name":"p"}],"leases":[{"id":"a","proxy":0,"extra":"eA=="}]}`), "no codec"},
		{"a lease on no proxy", gz(`{"version":1,"proxies":[],"leases":[{"id":"a","proxy":3}]}`), "names proxy 3 of 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decode(tc.data, nil)
			if !IsCorrupt(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decode: %v, want a corrupt-checkpoint error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	if o := DefaultOptions(); o.Enabled() || o.Validate() != nil {
		t.Fatalf("defaults: %v", o.Validate())
	}
	o := Options{SecretName: "Bad_Name", Interval: 0, JournalSegments: -1}
	err := o.Validate()
	for _, want := range []string{`--lease-checkpoint-secret "Bad_Name"`, "namespace is unknown", "--lease-checkpoint-interval: must be positive",
		"--lease-checkpoint-journal-segments: must be within 0..10000, got -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	ok := Options{SecretName: "leases", Namespace: "ops", Interval: time.Second}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}

// The streamed document is one JSON object of exactly the document's
// fields, as json.Marshal of a document would write (an operator of the
// version before, which reads it so, can roll back onto it).
func TestStreamedDocumentIsTheDocument(t *testing.T) {
	st := sampleState()
	st.TakenAt = t0
	want0, want1 := st.Leases[0].Proxy, st.Leases[1].Proxy
	data, err := (&encoder{}).encode(&st, 777, stringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	doc := strictDocument(t, data)
	want := document{Version: formatVersion, RVBase: 777, Revision: 42, TakenAt: t0.UnixNano(),
		Proxies: []lease.ProxyInfo{want0, want1},
		Leases: []storedLease{
			{ID: "a", Namespace: "crawl", Name: "named", Holder: "h", Flow: "h", Target: "site", Tier: 1, Proxy: 0, AcquiredAt: t0.UnixNano(),
				ExpiresAt: t0.Add(time.Hour).UnixNano(), TTL: time.Hour, LastResult: "ok", Revision: 41,
				Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"n": "v"}, Extra: []byte("template")},
			{ID: "b", Namespace: "crawl", Proxy: 1, ExpiresAt: t0.Add(time.Minute).UnixNano()},
		},
		Cooldowns: []storedCooldown{{Namespace: "crawl", Proxy: "p1", Target: "site", Until: t0.Add(time.Minute).UnixNano(), Holder: "h"}},
		Ended:     []storedEnded{{ID: "c", Namespace: "crawl", Name: "p1", ProxyNamespace: "crawl", Proxy: "p1", Target: "t", Holder: "h", Reason: lease.Released, Until: t0.Add(time.Minute).UnixNano()}},
	}
	if d := cmp.Diff(want, doc); d != "" {
		t.Errorf("document (-want +got):\n%s", d)
	}
}

// strictDocument decodes a compressed document with no field unknown to
// document and nothing after it.
func strictDocument(t *testing.T, data []byte) document {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(zr)
	dec.DisallowUnknownFields()
	var doc document
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	if dec.More() {
		t.Error("data after the document")
	}
	return doc
}

func recordFiller() *randfill.Filler {
	return randfill.NewWithSeed(1).NilChance(0.25).NumElements(0, 4).Funcs(
		plainjsontest.FillString,
		func(i *int64, c randfill.Continue) { *i = (c.Int63n(3) - 1) * c.Int63() },
		func(d *time.Duration, c randfill.Continue) { *d = time.Duration((c.Int63n(3) - 1) * c.Int63()) },
		func(i *int, c randfill.Continue) { *i = int(c.Int63n(3)-1) * c.Int() },
	)
}

// recordMismatches fills n of each record and lists where write (the hand
// encoder of a record) differs from json.Marshal.
func recordMismatches(write func(v any, b []byte) []byte, n int) []string {
	var out []string
	f := recordFiller()
	for i := range n {
		var l storedLease
		var c storedCooldown
		var e storedEnded
		f.Fill(&l)
		f.Fill(&c)
		f.Fill(&e)
		for _, v := range []any{&l, &c, &e} {
			want, err := json.Marshal(v)
			if err != nil {
				out = append(out, err.Error())
				continue
			}
			if got := write(v, []byte("x")); !bytes.Equal(got[1:], want) {
				out = append(out, fmt.Sprintf("record %d:\n got %s\nwant %s", i, got[1:], want))
			}
		}
	}
	return out
}

func appendRecord(v any, b []byte) []byte {
	switch r := v.(type) {
	case *storedLease:
		return r.appendJSON(b)
	case *storedCooldown:
		return r.appendJSON(b)
	case *storedEnded:
		return r.appendJSON(b)
	}
	panic(fmt.Sprintf("not a record: %T", v))
}

// The hand encoders of the records write what json.Marshal writes, so that
// the document stays the one TestStreamedDocumentIsTheDocument describes
// for every value (metadata maps, any strings, negative times, extra bytes).
func TestRecordsAreEncodingJSONs(t *testing.T) {
	if d := recordMismatches(appendRecord, 2000); len(d) > 0 {
		t.Errorf("%d records differ from json.Marshal; first:\n%s", len(d), d[0])
	}
}

// Negative control: the comparison catches an encoder that breaks one rule
// (here, a lease's name written even when empty).
func TestRecordCheckCatchesADifference(t *testing.T) {
	broken := func(v any, b []byte) []byte {
		out := appendRecord(v, b)
		if l, ok := v.(*storedLease); ok && l.Name == "" {
			out = bytes.Replace(out, []byte(`,"holder"`), []byte(`,"name":"","holder"`), 1)
		}
		return out
	}
	if d := recordMismatches(broken, 300); len(d) == 0 {
		t.Error("an encoder that writes empty names passed the comparison")
	}
}
