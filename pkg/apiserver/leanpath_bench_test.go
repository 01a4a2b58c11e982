package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The bodies client-go sends for a typed create and delete (captured from
// kube-apiserver's proxied requests).
const (
	clientGoCreateBody = `{"kind":"ProxyLease","apiVersion":"leasing.crawl.example.com/v1alpha1","metadata":{"generateName":"bench-"},"spec":{"target":"example.com"},"status":{}}`
	clientGoDeleteBody = `{"kind":"DeleteOptions","apiVersion":"leasing.crawl.example.com/v1alpha1"}`
)

// BenchmarkLeanPathCreateDelete is the lean path's own cost of a proxied
// create+delete pair as kube-apiserver sends it for client-go (front-proxy
// authentication, decoding, the lease, rendering and encoding the answer),
// without TLS and HTTP parsing. test/e2e/apiserver's BenchmarkCostPerPair
// measures the whole server through kube-apiserver.
//
//	go test ./pkg/apiserver -run '^$' -bench LeanPathCreateDelete -benchmem -count 6
func BenchmarkLeanPathCreateDelete(b *testing.B) {
	e := newLeanEnv(b)
	leaf := e.proxy.client(b, "front-proxy", epoch.Add(time.Hour))
	request := func(method, target, body string) *http.Request {
		r := proxiedRequest(method, target, body, leaf, "system:serviceaccount:ns:crawler")
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, */*")
		r.Header.Set("Audit-Id", "50425b49-02ac-4330-8f57-79ec9399695c")
		r.Header.Set("X-Remote-Uid", "d249a6d8-5763-490b-801e-fcbd32142380")
		r.Header.Set("X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id", "JTI=6f1c0f0e-4b8a-4c39-9a59-3f3e2c1d0b7a")
		return r
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		e.lean.ServeHTTP(w, request(http.MethodPost, leasesPath, clientGoCreateBody))
		if w.Code != http.StatusCreated {
			b.Fatalf("create: %d %s", w.Code, w.Body)
		}
		body := w.Body.String()
		i := strings.Index(body, `"name":"`) + len(`"name":"`)
		name := body[i : i+strings.IndexByte(body[i:], '"')]
		w = httptest.NewRecorder()
		e.lean.ServeHTTP(w, request(http.MethodDelete, leasesPath+"/"+name, clientGoDeleteBody))
		if w.Code != http.StatusOK {
			b.Fatalf("delete %s: %d %s", name, w.Code, w.Body)
		}
	}
	if n := e.f.store.Active(); n != 0 {
		b.Fatalf("%d leases left", n)
	}
}
