package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
)

type proxyURLKey struct{}

// proxyFromContext is the Transport's Proxy: the leased proxy the request's
// context names, with the lease's credentials.
func proxyFromContext(r *http.Request) (*url.URL, error) {
	u, _ := r.Context().Value(proxyURLKey{}).(*url.URL)
	if u == nil {
		return nil, errors.New("gateway: request without a leased proxy")
	}
	return u, nil
}

// hopHeaders are not forwarded (RFC 9110 §7.6.1), nor the gateway's own
// credentials.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward serves a plain HTTP request through a leased proxy.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, token, username string, o UsernameOptions) {
	if !r.URL.IsAbs() || r.URL.Scheme != "http" || r.URL.Host == "" {
		g.fail(w, KindHTTP, &Error{Reason: ReasonInvalid, Message: "the gateway is a forward proxy: send http:// URLs in absolute form, https:// through CONNECT"}, "")
		return
	}
	host := hostOf(r.URL.Host)
	h, done, err := g.leases.acquire(r.Context(), token, username, o, host)
	if err != nil {
		g.fail(w, KindHTTP, gatewayError(err), "")
		return
	}
	defer done()
	authenticatedConn(r)
	_, proxyURL, _ := g.leases.snapshot(h)
	// The lease's end ends the request (holding.traffic).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(h.traffic, cancel)
	defer stop()
	out := r.Clone(context.WithValue(ctx, proxyURLKey{}, proxyURL))
	out.RequestURI = ""
	for _, k := range hopHeaders {
		out.Header.Del(k)
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := g.transport.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left
		}
		if h.traffic.Err() != nil {
			g.fail(w, KindHTTP, &Error{Reason: ReasonUpstream, Message: "the lease " + h.id + " ended during the request"}, h.id)
			return
		}
		g.fail(w, KindHTTP, upstreamDialError(h.proxyAddr, err), h.id)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusProxyAuthRequired {
		// The leased proxy's answer, not the site's: passed on, it would
		// read as the gateway refusing the client's own credentials.
		g.fail(w, KindHTTP, &Error{Reason: ReasonUpstream, Message: "the leased proxy " + h.proxyAddr + " refused the lease's credentials (407)"}, h.id)
		return
	}
	if g.reportStatus(resp.StatusCode) {
		g.reportRateLimited(r.Context(), h, host)
	}
	for _, k := range hopHeaders {
		resp.Header.Del(k)
	}
	hdr := w.Header()
	for k, vs := range resp.Header {
		hdr[k] = vs
	}
	hdr.Set(LeaseIDHeader, h.id)
	w.WriteHeader(resp.StatusCode)
	n, err := io.Copy(w, resp.Body)
	g.rec.GatewayBytes("down", n)
	if err != nil && h.traffic.Err() != nil {
		// Cut, not finished: the client must not take it for the whole
		// response (net/http closes the connection).
		panic(http.ErrAbortHandler)
	}
	if r.ContentLength > 0 {
		g.rec.GatewayBytes("up", r.ContentLength)
	}
	g.rec.GatewayRequest(KindHTTP, OutcomeOK)
}
