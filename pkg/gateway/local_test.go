package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// recordingTransport answers 204 and records the requests it was sent.
type recordingTransport struct{ paths []string }

var _ http.RoundTripper = (*recordingTransport)(nil)

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.paths = append(r.paths, req.URL.Path)
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: req}, nil
}

// closeRecorder is a request body that remembers being closed.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// seen is what the in-process handler saw of a request.
type seen struct {
	Method, RequestURI, Host, RemoteAddr, Authorization, Body string
}

func TestLocalTransport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serving bool
		// handler answers when served in process.
		handler  http.HandlerFunc
		wantSeen []seen
		wantNext []string
		wantCode int
		wantHdr  http.Header
		wantBody string
	}{{
		name:    "serving: the handler answers, as the server would see the request",
		serving: true,
		handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			// Headers set after WriteHeader do not go out, as on the wire.
			w.Header().Set("X-Late", "1")
			_, _ = io.WriteString(w, `{"error":"busy"}`)
		},
		wantSeen: []seen{{Method: http.MethodPost, RequestURI: "/v1/leases?x=1", Host: "api.example:8090",
			RemoteAddr: localRemoteAddr, Authorization: "Bearer tok", Body: `{"target":"a.example"}`}},
		wantCode: http.StatusTooManyRequests,
		wantHdr:  http.Header{"Content-Type": {"application/json"}, "Retry-After": {"3"}},
		wantBody: `{"error":"busy"}`,
	}, {
		name:    "serving: a body without WriteHeader is a 200",
		serving: true,
		handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") },
		wantSeen: []seen{{Method: http.MethodPost, RequestURI: "/v1/leases?x=1", Host: "api.example:8090",
			RemoteAddr: localRemoteAddr, Authorization: "Bearer tok", Body: `{"target":"a.example"}`}},
		wantCode: http.StatusOK,
		wantHdr:  http.Header{},
		wantBody: "ok",
	}, {
		name:    "not serving: the request goes on through the network",
		serving: false,
		handler: func(http.ResponseWriter, *http.Request) {
			t.Error("the in-process handler was called while not serving")
		},
		wantNext: []string{"/v1/leases"},
		wantCode: http.StatusNoContent,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got []seen
			next := &recordingTransport{}
			rt := &localTransport{next: next, api: LocalAPI{
				Serving: func() bool { return tc.serving },
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					got = append(got, seen{r.Method, r.RequestURI, r.Host, r.RemoteAddr, r.Header.Get("Authorization"), string(b)})
					tc.handler(w, r)
				}),
			}}
			body := &closeRecorder{Reader: strings.NewReader(`{"target":"a.example"}`)}
			req, err := http.NewRequest(http.MethodPost, "https://api.example:8090/v1/leases?x=1", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer tok")
			before := req.Clone(req.Context())
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if diff := cmp.Diff(tc.wantSeen, got); diff != "" {
				t.Errorf("the handler saw (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNext, next.paths); diff != "" {
				t.Errorf("sent on through the network (-want +got):\n%s", diff)
			}
			if resp.StatusCode != tc.wantCode || string(b) != tc.wantBody {
				t.Errorf("answer %d %q, want %d %q", resp.StatusCode, b, tc.wantCode, tc.wantBody)
			}
			if tc.wantHdr != nil {
				if diff := cmp.Diff(tc.wantHdr, resp.Header); diff != "" {
					t.Errorf("answer's headers (-want +got):\n%s", diff)
				}
				if resp.ContentLength != int64(len(tc.wantBody)) || resp.Request != req {
					t.Errorf("ContentLength %d, Request %p: want %d, %p", resp.ContentLength, resp.Request, len(tc.wantBody), req)
				}
				if !body.closed {
					t.Error("the request body was not closed")
				}
			}
			// A RoundTripper must not modify the request.
			if req.RequestURI != before.RequestURI || req.RemoteAddr != before.RemoteAddr || req.Host != before.Host {
				t.Errorf("the request was modified: RequestURI %q RemoteAddr %q Host %q", req.RequestURI, req.RemoteAddr, req.Host)
			}
		})
	}
}
