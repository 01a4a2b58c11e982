package apiserver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	kjson "sigs.k8s.io/json"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/plainjson"
)

// decodeBodies are request bodies at the edges of what the serializer
// accepts: kinds and apiVersions present, absent, partial, of other types or
// malformed; unknown, duplicate and case-variant keys; wrong value types.
var decodeBodies = []string{
	clientGoCreateBody,
	clientGoDeleteBody,
	`{}`, `null`, `[]`, `"x"`, `{`, `{"kind":"ProxyLease"}{}`,
	`{"kind":"ProxyLease","spec":{"target":"a"}}`,
	`{"apiVersion":"leasing.crawl.example.com/v1alpha1","spec":{"target":"a"}}`,
	`{"apiVersion":"v1alpha1","kind":"ProxyLease"}`,
	`{"apiVersion":"leasing.crawl.example.com","kind":"ProxyLease"}`,
	`{"apiVersion":"leasing.crawl.example.com/","kind":"ProxyLease"}`,
	`{"apiVersion":"leasing.crawl.example.com/__internal","kind":"ProxyLease"}`,
	`{"apiVersion":"a/b/c","kind":"ProxyLease"}`,
	`{"apiVersion":"v1","kind":"ProxyLease"}`,
	`{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLeaseReport","result":"ok"}`,
	`{"apiVersion":"v1","kind":"Status"}`,
	`{"kind":"ProxyLease","Kind":"Status"}`,
	`{"KIND":"Status","spec":{}}`,
	`{"kind":"ProxyLease","kind":"ProxyLease"}`,
	`{"kind":"ProxyLease","spec":{"colour":"red"}}`,
	`{"kind":"ProxyLease","spec":{"Target":"a"}}`,
	`{"kind":"ProxyLease","spec":{"ttlSeconds":"60"}}`,
	`{"kind":"ProxyLease","spec":{"ttlSeconds":1e2}}`,
	`{"kind":"ProxyLease","spec":{"ttlSeconds":99999999999}}`,
	`{"kind":"ProxyLease","metadata":{"name":"a","labels":{"x":"y"},"creationTimestamp":null},"spec":{"selector":{"region":"eu"},"waitSeconds":3,"priority":-1}}`,
	`{"kind":"ProxyLease","metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"u"}]}}`,
	`{"kind":"DeleteOptions","apiVersion":"v1"}`,
	`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1"}`,
	`{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"nope"},"propagationPolicy":"Background"}`,
	`{"kind":"DeleteOptions","apiVersion":"leasing.crawl.example.com/v1alpha1","dryRun":["All"],"gracePeriodSeconds":0}`,
	`{"kind":"DeleteOptions"}`,
	`{"kind":"DeleteOptions","apiVersion":"apps/v1"}`,
	`{"kind":"DeleteOptions","unknown":1}`,
	// At the edges of the plain scanner.
	` { "kind" : "ProxyLease" , "spec" : { "ttlSeconds" : -0 , "waitSeconds":0,"priority":-2147483648 } }` + "\n\t\r ",
	`{"kind":"ProxyLease","spec":{"priority":2147483648}}`,
	`{"kind":"ProxyLease","spec":{"priority":-2147483649}}`,
	`{"kind":"ProxyLease","spec":{"ttlSeconds":01}}`,
	`{"kind":"ProxyLease","spec":{"ttlSeconds":-}}`,
	`{"kind":"ProxyLease","spec":{"ttlSeconds":6.0}}`,
	`{"kind":"ProxyLease","spec":{"ttlSeconds":null}}`,
	`{"kind":"ProxyLease","spec":{"target":null}}`,
	`{"kind":"ProxyLease","spec":{"target":"a\"b"}}`,
	`{"kind":"ProxyLease","spec":{"target":"\u0061"}}`,
	`{"kind":"ProxyLease","spec":{"target":"héllo"}}`,
	"{\"kind\":\"ProxyLease\",\"spec\":{\"target\":\"a\tb\"}}",
	`{"kind":"ProxyLease","spec":{"selector":{}}}`,
	`{"kind":"ProxyLease","spec":{"selector":{"a":"1","a":"2"}}}`,
	`{"kind":"ProxyLease","spec":{"selector":{"a":1}}}`,
	`{"kind":"ProxyLease","metadata":{"labels":null}}`,
	`{"kind":"ProxyLease","metadata":{"creationTimestamp":null,"annotations":{"x":"<&>"}}}`,
	`{"kind":"ProxyLease","metadata":{"creationTimestamp":"2026-01-01T00:00:00Z"}}`,
	`{"kind":"ProxyLease","status":{}}`,
	`{"kind":"ProxyLease","status":{"leaseID":"x"}}`,
	`{"kind":"ProxyLease",}`,
	`{"kind":"ProxyLease"} x`,
	`{"kind":"ProxyLease"}}`,
	`{"kind":"ProxyLease" "spec":{}}`,
	`{"kind":ProxyLease}`,
	`{"kind":"ProxyLease","spec":{"target":"a"}`,
	"\ufeff{}",
}

// decodeFunc is the lean path's decode, or a variant of it.
type decodeFunc func(p *leanPath, body []byte, into runtime.Object, tm *metav1.TypeMeta) error

// decodeDifferences decodes body into a ProxyLease and into DeleteOptions
// with decode and with the generic server's strict serializer (what the lean
// path decoded with before), and describes where they differ: one accepts
// and the other refuses, or both accept with different objects.
func decodeDifferences(t testing.TB, decode decodeFunc, body string) []string {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	lean := newLeanPath(nil, nil, nil, scheme, newCodecs(scheme))
	reference := serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, scheme, scheme, serializerjson.SerializerOptions{Strict: true})
	var out []string
	for _, target := range []func() (runtime.Object, *metav1.TypeMeta){
		func() (runtime.Object, *metav1.TypeMeta) {
			pl := &leasingv1alpha1.ProxyLease{}
			return pl, &pl.TypeMeta
		},
		func() (runtime.Object, *metav1.TypeMeta) { o := &metav1.DeleteOptions{}; return o, &o.TypeMeta },
	} {
		want, _ := target()
		obj, _, err := reference.Decode([]byte(body), nil, want)
		wantOK := err == nil && obj == want
		got, tm := target()
		gotOK := decode(lean, []byte(body), got, tm) == nil
		switch {
		case gotOK != wantOK:
			out = append(out, fmt.Sprintf("%T from %s: accepted %v, the serializer %v (%v)", got, body, gotOK, wantOK, err))
		case gotOK:
			if d := cmp.Diff(want, got); d != "" {
				out = append(out, fmt.Sprintf("%T from %s (-serializer +lean):\n%s", got, body, d))
			}
		}
	}
	return out
}

// The lean path accepts exactly the bodies the generic server's serializer
// decodes into the type asked for, into the same objects; it refuses (hands
// over) the rest.
func TestLeanPathDecodesAsTheSerializer(t *testing.T) {
	for _, body := range decodeBodies {
		for _, d := range decodeDifferences(t, (*leanPath).decode, body) {
			t.Error(d)
		}
	}
}

// Negative control: a decode that checks strictness but not the kind is
// caught by the comparison.
func TestLeanPathDecodeCheckCatchesAMissingKindRule(t *testing.T) {
	strictOnly := func(_ *leanPath, body []byte, into runtime.Object, _ *metav1.TypeMeta) error {
		strictErrs, err := kjson.UnmarshalStrict(body, into)
		if err == nil && len(strictErrs) > 0 {
			err = runtime.NewStrictDecodingError(strictErrs)
		}
		return err
	}
	n := 0
	for _, body := range decodeBodies {
		n += len(decodeDifferences(t, strictOnly, body))
	}
	if n == 0 {
		t.Error("a decode without the kind rule passed the comparison")
	}
}

// The scanner reads the bodies client-go sends (so the common request never
// reaches the reflective decoder) and leaves everything else to it.
func TestScanPlainTakesClientGoBodies(t *testing.T) {
	for body, want := range map[string]bool{
		clientGoCreateBody: true,
		clientGoDeleteBody: true,
		`{"kind":"ProxyLease","apiVersion":"leasing.crawl.example.com/v1alpha1","metadata":{"name":"a","namespace":"ns","labels":{"team":"x"},"creationTimestamp":null},"spec":{"selector":{"region":"eu"},"target":"example.com","ttlSeconds":60,"waitSeconds":5,"priority":1},"status":{}}`: true,
		`{"kind":"ProxyLease","spec":{"target":"a\u0062"}}`:     false, // an escape
		`{"kind":"ProxyLease","spec":{"target":"é"}}`:           false, // not ASCII
		`{"kind":"ProxyLease","kind":"ProxyLease"}`:             false, // repeated
		`{"kind":"ProxyLease","spec":{"ttlSeconds":1e2}}`:       false, // not an integer
		`{"kind":"ProxyLease","spec":{"ttlSeconds":"60"}}`:      false, // not a number
		`{"kind":"ProxyLease","metadata":{"finalizers":[]}}`:    false, // not a plain field
		`{"kind":"DeleteOptions","propagationPolicy":"Orphan"}`: false,
	} {
		for _, into := range []runtime.Object{&leasingv1alpha1.ProxyLease{}, &metav1.DeleteOptions{}} {
			kind := "DeleteOptions"
			if _, ok := into.(*leasingv1alpha1.ProxyLease); ok {
				kind = "ProxyLease"
			}
			if !strings.Contains(body, `"kind":"`+kind+`"`) {
				continue
			}
			if got := scanPlain([]byte(body), into); got != want {
				t.Errorf("scanPlain(%s) into %T = %v, want %v", body, into, got, want)
			}
		}
	}
	// A body with more keys than the scanner checks for repeats is the
	// strict decoder's.
	many := `{"kind":"ProxyLease","spec":{"selector":{` + ""
	for i := range plainjson.MaxKeys + 1 {
		if i > 0 {
			many += ","
		}
		many += fmt.Sprintf(`"k%d":"v"`, i)
	}
	many += `}}}`
	if scanPlain([]byte(many), &leasingv1alpha1.ProxyLease{}) {
		t.Errorf("scanPlain took %d keys in one object", plainjson.MaxKeys+1)
	}
	if d := decodeDifferences(t, (*leanPath).decode, many); len(d) > 0 {
		t.Error(d)
	}
}

func FuzzLeanPathDecode(f *testing.F) {
	for _, body := range decodeBodies {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, d := range decodeDifferences(t, (*leanPath).decode, body) {
			t.Error(d)
		}
	})
}
