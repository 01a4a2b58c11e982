package apiserver

import (
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// notLoadedCA is the library's ConfigMap CA before its informer synced.
type notLoadedCA struct {
	dynamiccertificates.CAContentProvider
}

func (notLoadedCA) VerifyOptions() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }

// Until the front proxy's CA is loaded, a request kube-apiserver proxied is
// answered 503 with Retry-After (not handed to an authenticator that would
// call it system:anonymous and answer 403), and the readiness check fails;
// other requests pass, and everything passes once the CA is loaded.
func TestFrontProxyReadiness(t *testing.T) {
	ca := newTestCA(t, "front-proxy-ca")
	leaf := ca.client(t, "front-proxy", epoch.Add(time.Hour))
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	codecs := newCodecs(scheme)
	type want struct {
		Code       int
		RetryAfter string
		Reason     metav1.StatusReason
		Passed     bool
	}
	passed := want{Code: http.StatusTeapot, Passed: true}
	unavailable := want{Code: http.StatusServiceUnavailable, RetryAfter: "1", Reason: metav1.StatusReasonServiceUnavailable}
	tests := []struct {
		name      string
		loaded    bool
		noHeaders bool // the cluster configures no front-proxy user header
		req       *http.Request
		want      want
		wantReady bool
	}{
		{"proxied before the CA is loaded", false, false, proxiedRequest("DELETE", "/apis/leasing.crawl.example.com/v1alpha1/namespaces/crawl/proxyleases/a", "", leaf, "alice"), unavailable, false},
		{"direct request (no certificate) before the CA is loaded", false, false, proxiedRequest("GET", "/apis", "", nil, ""), passed, false},
		{"certificate without a user header before the CA is loaded", false, false, proxiedRequest("GET", "/apis", "", leaf, ""), passed, false},
		{"proxied once the CA is loaded", true, false, proxiedRequest("DELETE", "/apis/leasing.crawl.example.com/v1alpha1/namespaces/crawl/proxyleases/a", "", leaf, "alice"), passed, true},
		{"no front proxy in this cluster", false, true, proxiedRequest("GET", "/apis", "", leaf, "alice"), passed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			provider := &switchableCA{CAContentProvider: notLoadedCA{staticCA(t, ca)}}
			if tt.loaded {
				provider.CAContentProvider = staticCA(t, ca)
			}
			cfg := requestHeaderConfig(t, provider)
			if tt.noHeaders {
				cfg.UsernameHeaders = headerrequest.StaticStringSlice{}
			}
			f := newFrontProxyReadiness(cfg)
			rec := httptest.NewRecorder()
			next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
			f.wrap(next, codecs).ServeHTTP(rec, tt.req)
			got := want{Code: rec.Code, RetryAfter: rec.Header().Get("Retry-After"), Passed: rec.Code == http.StatusTeapot}
			if !got.Passed {
				var st metav1.Status
				if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
					t.Fatalf("body %q: %v", rec.Body, err)
				}
				got.Reason = st.Reason
				if !strings.Contains(st.Message, "extension-apiserver-authentication") {
					t.Errorf("message %q does not say what is missing", st.Message)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if ready := f.ready() == nil; ready != tt.wantReady {
				t.Errorf("ready = %v, want %v", ready, tt.wantReady)
			}
		})
	}
}
