package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
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

// hopHeaders are never forwarded: RFC 9110 §7.6.1's and the ones HTTP/1.1
// implementations use as such (the list httputil.ReverseProxy drops), which
// include the gateway's own credentials.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHop deletes from h the headers its Connection field names (RFC
// 9110 §7.6.1: a sender lists there the fields meant for the next hop only),
// then hopHeaders. It keeps "Te: trailers" when the request had it, as
// httputil.ReverseProxy does: the one TE value an end-to-end request may carry
// (RFC 9110 §10.1.4).
func removeHopByHop(h http.Header, request bool) {
	trailers := request && headerHasToken(h["Te"], "trailers")
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	if trailers {
		h.Set("Te", "trailers")
	}
}

// headerHasToken reports whether a comma-separated header field lists token
// (case-insensitively, without parameters: TE's grammar gives "trailers"
// none).
func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

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
	removeHopByHop(out.Header, true)
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
	removeHopByHop(resp.Header, false)
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
