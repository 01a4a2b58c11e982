package apiserver

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

// generic stands in for the generic server's chain: it records what reached
// it, body and user headers included.
type generic struct {
	calls   int
	body    string
	userHdr string
	// group and extra are true when the request's group and extra headers
	// arrived.
	group, extra bool
}

func (g *generic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.calls++
	data, _ := io.ReadAll(r.Body)
	g.body, g.userHdr = string(data), r.Header.Get("X-Remote-User")
	g.group = slices.Contains(r.Header.Values("X-Remote-Group"), "system:serviceaccounts")
	g.extra = slices.Equal(r.Header.Values("X-Remote-Extra-Scopes"), []string{"a"})
	w.WriteHeader(http.StatusTeapot)
}

type leanEnv struct {
	f     *fixture
	next  *generic
	lean  *leanPath
	proxy *testCA
}

func newLeanEnv(t testing.TB) *leanEnv {
	t.Helper()
	f := newFixture(t, lease.Options{MaxLeasesPerProxy: 4}, proxy("ns", "px", map[string]string{"region": "eu"}))
	ca := newTestCA(t, "front-proxy-ca")
	authn := newFrontProxyAuthenticator(requestHeaderConfig(t, &switchableCA{CAContentProvider: staticCA(t, ca)}), clocktesting.NewFakeClock(epoch))
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	e := &leanEnv{f: f, next: &generic{}, proxy: ca}
	e.lean = newLeanPath(e.next, authn, f.rest, scheme, newCodecs(scheme))
	return e
}

const leasesPath = "/apis/leasing.crawl.example.com/v1alpha1/namespaces/ns/proxyleases"

func (e *leanEnv) serve(t testing.TB, method, target, body string, fromProxy bool) *httptest.ResponseRecorder {
	t.Helper()
	var leaf = e.proxy.client(t, "front-proxy", epoch.Add(time.Hour))
	if !fromProxy {
		leaf = nil
	}
	r := proxiedRequest(method, target, body, leaf, "system:serviceaccount:ns:crawler")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, */*")
	w := httptest.NewRecorder()
	e.lean.ServeHTTP(w, r)
	return w
}

// The lean path answers a proxied create and delete itself, as the generic
// server would (status codes, the object with its kind, Status errors); no
// managed fields are recorded.
func TestLeanPathServesProxiedCreateAndDelete(t *testing.T) {
	e := newLeanEnv(t)
	w := e.serve(t, "POST", leasesPath, `{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLease","metadata":{"generateName":"c-","labels":{"team":"x"}},"spec":{"selector":{"region":"eu"},"target":"example.com"}}`, true)
	if w.Code != http.StatusCreated || e.next.calls != 0 {
		t.Fatalf("create: %d %s (generic chain called %d times)", w.Code, w.Body, e.next.calls)
	}
	var got leasingv1alpha1.ProxyLease
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "ProxyLease" || got.APIVersion != "leasing.crawl.example.com/v1alpha1" || !strings.HasPrefix(got.Name, "c-") ||
		got.Status.HolderIdentity != "system:serviceaccount:ns:crawler" || got.Status.Proxy == nil || got.Labels["team"] != "x" ||
		got.UID == "" || got.CreationTimestamp.IsZero() || len(got.ManagedFields) != 0 {
		t.Errorf("created %+v", got)
	}

	// A precondition that does not hold: 409 as a Status, the lease kept.
	w = e.serve(t, "DELETE", leasesPath+"/"+got.Name, `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"nope"}}`, true)
	var st metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || w.Code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict {
		t.Errorf("delete with a wrong UID: %d %s", w.Code, w.Body)
	}
	if n := e.f.store.Active(); n != 1 {
		t.Fatalf("%d leases after a refused delete, want 1", n)
	}
	w = e.serve(t, "DELETE", leasesPath+"/"+got.Name, `{"kind":"DeleteOptions","apiVersion":"leasing.crawl.example.com/v1alpha1"}`, true)
	if w.Code != http.StatusOK || e.f.store.Active() != 0 || !strings.Contains(w.Body.String(), `"kind":"ProxyLease"`) {
		t.Errorf("delete: %d %s, %d leases left", w.Code, w.Body, e.f.store.Active())
	}
	// An invalid lease is 422 naming the field, as from the generic server.
	w = e.serve(t, "POST", leasesPath, `{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLease","spec":{"ttlSeconds":7200}}`, true)
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), "spec.ttlSeconds") {
		t.Errorf("create over the maximum TTL: %d %s", w.Code, w.Body)
	}
	if e.next.calls != 0 {
		t.Errorf("the generic chain was called %d times", e.next.calls)
	}
}

// Whatever the lean path cannot answer exactly as the generic server would
// reaches the generic chain whole: the body as sent, the user headers in place.
func TestLeanPathHandsOverTheRest(t *testing.T) {
	create := `{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLease","spec":{}}`
	tests := []struct {
		name, method, target, body string
		fromProxy                  bool
	}{
		{"a direct request", "POST", leasesPath, create, false},
		{"a query (field manager, dry run)", "POST", leasesPath + "?fieldManager=kubectl-create", create, true},
		{"an unknown field", "POST", leasesPath, `{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLease","spec":{"colour":"red"}}`, true},
		{"another kind", "POST", leasesPath, `{"apiVersion":"v1","kind":"Status"}`, true},
		{"a get", "GET", leasesPath + "/x", "", true},
		{"an update", "PUT", leasesPath + "/x", create, true},
		{"the report subresource", "POST", leasesPath + "/x/report", `{"result":"ok"}`, true},
		{"another resource", "POST", "/apis/leasing.crawl.example.com/v1alpha1/namespaces/ns/other", create, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newLeanEnv(t)
			w := e.serve(t, tt.method, tt.target, tt.body, tt.fromProxy)
			want := generic{calls: 1, body: tt.body, userHdr: "system:serviceaccount:ns:crawler", group: true, extra: true}
			if d := cmp.Diff(want, *e.next, cmp.AllowUnexported(generic{})); d != "" || w.Code != http.StatusTeapot {
				t.Errorf("generic chain saw (-want +got):\n%s(answer %d)", d, w.Code)
			}
			if n := e.f.store.Active(); n != 0 {
				t.Errorf("%d leases made", n)
			}
		})
	}
}

// Only plain JSON is answered on the lean path; a Table, YAML or protobuf is
// negotiated by the generic chain.
func TestAcceptsPlainJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                      true,
		"application/json, */*": true,
		"application/json":      true,
		"*/*":                   true,
		"application/yaml":      false,
		"application/vnd.kubernetes.protobuf,application/json":          false,
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json": false,
	} {
		if got := acceptsPlainJSON(accept); got != want {
			t.Errorf("acceptsPlainJSON(%q) = %v, want %v", accept, got, want)
		}
	}
}

// readBody returns the whole body whatever Content-Length said, and the
// reader's error when it ends early.
func TestReadBody(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		length  int64
		want    string
		wantErr error
	}{
		{"the declared length", "0123456789", 10, "0123456789", nil},
		{"unknown length", "0123456789", -1, "0123456789", nil},
		{"longer than declared", "0123456789", 4, "0123456789", nil},
		{"shorter than declared", "0123", 10, "0123", io.ErrUnexpectedEOF},
		{"empty", "", 0, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte per Read, as a slow connection delivers it.
			got, err := readBody(iotest.OneByteReader(strings.NewReader(tt.body)), tt.length)
			if string(got) != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("readBody = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	// Over the limit: MaxBytesReader's error, which the lean path answers 413.
	r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader("0123456789")), 5)
	var tooLarge *http.MaxBytesError
	if _, err := readBody(r, 10); !errors.As(err, &tooLarge) {
		t.Errorf("over the limit: %v, want a MaxBytesError", err)
	}
}

// A body over the limit is 413 and a truncated one 400, both as Status
// objects, and neither acquires anything.
func TestLeanPathRefusesUnreadableBodies(t *testing.T) {
	e := newLeanEnv(t)
	e.lean.maxBytes = 64
	leaf := e.proxy.client(t, "front-proxy", epoch.Add(time.Hour))
	tests := []struct {
		name          string
		body          string
		contentLength int64
		wantCode      int
		wantMessage   string
	}{
		{"over the limit", clientGoCreateBody, int64(len(clientGoCreateBody)), http.StatusRequestEntityTooLarge, "over 64 bytes"},
		{"truncated", `{"kind":"ProxyLease"}`, 40, http.StatusBadRequest, "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := proxiedRequest("POST", leasesPath, tt.body, leaf, "system:serviceaccount:ns:crawler")
			r.Header.Set("Content-Type", "application/json")
			r.ContentLength = tt.contentLength
			w := httptest.NewRecorder()
			e.lean.ServeHTTP(w, r)
			var st metav1.Status
			if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || w.Code != tt.wantCode || int(st.Code) != tt.wantCode ||
				!strings.Contains(st.Message, tt.wantMessage) {
				t.Errorf("answer %d %s, want %d with %q", w.Code, w.Body, tt.wantCode, tt.wantMessage)
			}
			if n := e.f.store.Active(); n != 0 || e.next.calls != 0 {
				t.Errorf("%d leases made, generic chain called %d times", n, e.next.calls)
			}
		})
	}
}
