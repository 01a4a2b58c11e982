package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// LocalAPI is the HTTP lease API as this process serves it, for a gateway
// on the replica that serves leases: there, the Service in front of the
// replicas would route the gateway's lease calls back to this process,
// through TLS and the network, twice per request or tunnel.
type LocalAPI struct {
	// Handler is the lease API's handler (discovery.Server.Handler): its
	// authentication, body limit and answers are the network path's.
	Handler http.Handler
	// Serving reports whether this replica serves leases now (the lease
	// gate: it leads and has loaded the leases).
	Serving func() bool
}

// localRemoteAddr is the RemoteAddr the API's request log shows for a call
// served in this process.
const localRemoteAddr = "gateway-in-process"

// localTransport serves a lease API request with api.Handler in this
// process while api.Serving says this replica serves leases, and sends it
// through next otherwise. A call that meets the leadership moving between
// the check and the handler gets the handler's not_leader answer (503
// with Retry-After), as the network path does during a handover.
type localTransport struct {
	api  LocalAPI
	next http.RoundTripper
}

var _ http.RoundTripper = (*localTransport)(nil)

// RoundTrip implements http.RoundTripper: it does not modify req and
// closes its body.
func (t *localTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.api.Serving() {
		return t.next.RoundTrip(req)
	}
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = localRemoteAddr
	if in.Host == "" {
		in.Host = req.URL.Host
	}
	if in.Body == nil {
		in.Body = http.NoBody
	}
	defer in.Body.Close()
	w := &localResponse{header: http.Header{}}
	t.api.Handler.ServeHTTP(w, in)
	return w.response(req), nil
}

// localResponse is a handler's answer kept in memory: what it sent is what
// a client reads off the wire, the headers as they were at WriteHeader.
type localResponse struct {
	header http.Header
	sent   http.Header
	status int
	body   bytes.Buffer
}

func (w *localResponse) Header() http.Header { return w.header }

func (w *localResponse) WriteHeader(status int) {
	if w.status != 0 || status < 200 {
		return
	}
	w.status, w.sent = status, w.header.Clone()
}

func (w *localResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

func (w *localResponse) response(req *http.Request) *http.Response {
	w.WriteHeader(http.StatusOK)
	return &http.Response{
		Status:     fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode: w.status,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        w.sent,
		Body:          io.NopCloser(bytes.NewReader(w.body.Bytes())),
		ContentLength: int64(w.body.Len()),
		Request:       req,
	}
}
