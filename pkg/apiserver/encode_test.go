package apiserver

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/plainjson/plainjsontest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// leaseFiller fills every field of a ProxyLease: any runes in strings (a
// tricky one a third of the time), times with nanoseconds in other zones or
// zero, integers of either sign or zero, nil and empty maps and slices.
func leaseFiller(seed int64) *randfill.Filler {
	zones := []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+1800), time.FixedZone("minus", -7*3600)}
	return randfill.NewWithSeed(seed).NilChance(0.25).NumElements(0, 20).Funcs(
		plainjsontest.FillString,
		func(t *metav1.Time, c randfill.Continue) {
			switch c.Intn(4) {
			case 0:
				*t = metav1.Time{}
			case 1:
				// The zero instant in a zone: zero to IsZero, not to ==.
				*t = metav1.NewTime(time.Time{}.In(zones[1]))
			default:
				*t = metav1.NewTime(time.Unix(c.Int63n(4e9), c.Int63n(1e9)).In(zones[c.Intn(len(zones))]))
			}
		},
		// Zero a third of the time, for omitempty.
		func(i *int32, c randfill.Continue) { *i = int32(c.Int63n(3)-1) * c.Int31() },
		func(i *int64, c randfill.Continue) { *i = (c.Int63n(3) - 1) * c.Int63() },
		// Valid JSON, so that the codec can encode what the fast path leaves
		// to it.
		func(f *metav1.FieldsV1, c randfill.Continue) { f.SetRawString(`{"f:spec":{}}`) },
	)
}

// codecJSON is the generic server's encoding of obj, with the lean path's
// encoder configuration.
func codecJSON(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := newLeanPath(nil, nil, nil, scheme, newCodecs(scheme)).encoder.Encode(obj, &buf); err != nil {
		t.Fatalf("codec: %v", err)
	}
	return buf.Bytes()
}

// encodeMismatches encodes n random ProxyLeases with encode and with the
// codec, and describes each difference: output unlike the codec's, a fast
// path declined although the object has no owner references or managed
// fields, or one taken although it has.
func encodeMismatches(t testing.TB, encode func([]byte, *leasingv1alpha1.ProxyLease) ([]byte, bool), n int) []string {
	t.Helper()
	filler := leaseFiller(1)
	var out []string
	for i := range n {
		pl := &leasingv1alpha1.ProxyLease{}
		filler.Fill(pl)
		pl.TypeMeta = metav1.TypeMeta{}
		if i%4 != 0 {
			// Mostly what the lean path serves.
			pl.OwnerReferences, pl.ManagedFields = nil, nil
		}
		leftToCodec := len(pl.OwnerReferences) > 0 || len(pl.ManagedFields) > 0
		got, ok := encode([]byte("prefix"), pl)
		switch {
		case !bytes.HasPrefix(got, []byte("prefix")):
			out = append(out, fmt.Sprintf("object %d: the buffer's content was overwritten", i))
		case ok == leftToCodec:
			out = append(out, fmt.Sprintf("object %d: encoded %v with owner references or managed fields %v", i, ok, leftToCodec))
		case !ok && len(got) != len("prefix"):
			out = append(out, fmt.Sprintf("object %d: declined but appended %q", i, got[len("prefix"):]))
		case ok:
			if want := codecJSON(t, pl); !bytes.Equal(got[len("prefix"):], want) {
				out = append(out, fmt.Sprintf("object %d:\n got %s\nwant %s", i, got[len("prefix"):], want))
			}
		}
	}
	return out
}

// The lean path's encoder writes exactly what the codec writes, for objects
// with every field set in every way, and leaves only owner references and
// managed fields to the codec.
func TestProxyLeaseJSONIsTheCodecs(t *testing.T) {
	if d := encodeMismatches(t, appendProxyLeaseJSON, 3000); len(d) > 0 {
		t.Errorf("%d of 3000 differ from the codec; first:\n%s", len(d), d[0])
	}
}

// Negative control: the comparison catches an encoder that differs from the
// codec in one rule only (here, no HTML escaping).
func TestProxyLeaseJSONCheckCatchesADifference(t *testing.T) {
	noHTMLEscaping := func(b []byte, pl *leasingv1alpha1.ProxyLease) ([]byte, bool) {
		out, ok := appendProxyLeaseJSON(b, pl)
		return bytes.ReplaceAll(out, []byte(`\u003c`), []byte("<")), ok
	}
	if d := encodeMismatches(t, noHTMLEscaping, 300); len(d) == 0 {
		t.Error("an encoder without HTML escaping passed the comparison")
	}
}

// A lease as the server renders it, with every field the store fills,
// encodes as the codec does (the case the fuzzing above makes rare: all of
// it realistic at once).
func TestProxyLeaseJSONOfARenderedLease(t *testing.T) {
	f := newFixture(t, lease.Options{}, proxy("ns", "px", map[string]string{"region": "eu", "tier": "<gold>"}))
	pl := f.mustCreate(ctxFor("ns", "system:serviceaccount:ns:crawler"), newLease("", func(pl *leasingv1alpha1.ProxyLease) {
		pl.GenerateName = "c-"
		pl.Labels = map[string]string{"team": "x"}
		pl.Spec.Selector = map[string]string{"region": "eu"}
		pl.Spec.Target = "example.com"
		pl.Spec.WaitSeconds = 3
		pl.Spec.Priority = -2
	}))
	got, ok := appendProxyLeaseJSON(nil, pl)
	if want := codecJSON(t, pl); !ok || !bytes.Equal(got, want) {
		t.Fatalf("encoded (%v)\n%s\nthe codec\n%s", ok, got, want)
	}
	for _, field := range []string{`"kind":"ProxyLease"`, `"generateName":"c-"`, `"waitSeconds":3`, `"tier":"\u003cgold\u003e"`, `"conditions":[{"type":"ProxyHealthy"`} {
		if !strings.Contains(string(got), field) {
			t.Errorf("no %s in %s", field, got)
		}
	}
}

// FuzzProxyLeaseJSON: any strings in the fields a client sets, any time.
func FuzzProxyLeaseJSON(f *testing.F) {
	for _, s := range plainjsontest.TrickyStrings() {
		f.Add(s, s, int64(1700000000123456789))
	}
	f.Fuzz(func(t *testing.T, name, value string, nanos int64) {
		at := metav1.NewTime(time.Unix(0, nanos))
		pl := &leasingv1alpha1.ProxyLease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{name: value, "k": value}, CreationTimestamp: at},
			Spec:       leasingv1alpha1.ProxyLeaseSpec{Target: value, Selector: map[string]string{value: name}},
			Status: leasingv1alpha1.ProxyLeaseStatus{HolderIdentity: value, AcquireTime: &at,
				Conditions: []metav1.Condition{{Type: name, Message: value, LastTransitionTime: at}}},
		}
		got, ok := appendProxyLeaseJSON(nil, pl)
		if want := codecJSON(t, pl); !ok || !bytes.Equal(got, want) {
			t.Fatalf("encoded (%v)\n%s\nthe codec\n%s", ok, got, want)
		}
	})
}
