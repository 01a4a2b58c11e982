package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// tunnel serves a CONNECT: a lease for the tunnel's host, a CONNECT through
// the leased proxy with the lease's credentials, then bytes both ways until
// either side closes. The lease is released when the tunnel ends.
func (g *Gateway) tunnel(w http.ResponseWriter, r *http.Request, token, username string, o UsernameOptions) {
	authority := r.Host
	if _, port, err := net.SplitHostPort(authority); err != nil || port == "" {
		g.fail(w, KindConnect, &Error{Reason: ReasonInvalid, Message: fmt.Sprintf("CONNECT %q: want host:port", authority)}, "")
		return
	}
	host := hostOf(authority)
	h, done, err := g.leases.acquire(r.Context(), token, username, o, host)
	if err != nil {
		g.fail(w, KindConnect, gatewayError(err), "")
		return
	}
	defer done()
	authenticatedConn(r)
	addr, _, auth := g.leases.snapshot(h)
	up, br, gerr, siteRefused := g.connect(r.Context(), addr, auth, authority)
	if gerr != nil {
		if siteRefused {
			// The site refused through this proxy: move the next tunnel.
			g.reportRateLimited(r.Context(), h, host)
		}
		g.fail(w, KindConnect, gerr, h.id)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		g.fail(w, KindConnect, &Error{Reason: ReasonInvalid, Message: "CONNECT needs HTTP/1.1"}, h.id)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	// The lease's end ends the tunnel (holding.traffic).
	stop := context.AfterFunc(h.traffic, func() {
		_ = conn.Close()
		_ = up.Close()
	})
	defer stop()
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n"+LeaseIDHeader+": "+h.id+"\r\n\r\n"); err != nil {
		return
	}
	g.track(conn, true)
	defer g.track(conn, false)
	g.rec.GatewayTunnels(1)
	defer g.rec.GatewayTunnels(-1)
	g.rec.GatewayRequest(KindConnect, OutcomeOK)
	// Bytes either side sent ahead of the tunnel's start.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := conn.Write(b); err != nil {
			return
		}
	}
	errc := make(chan struct{}, 1)
	go func() {
		n := g.relay.copy(conn, up)
		g.rec.GatewayBytes("down", n)
		errc <- struct{}{}
	}()
	n := g.relay.copy(up, conn)
	g.rec.GatewayBytes("up", n)
	<-errc
}

// connect opens a tunnel to authority through the proxy at addr: on a warm
// connection to it when there is one (warm.go), else on a new one. On an
// error, siteRefused says the proxy answered that the site refused (to be
// reported); otherwise the proxy itself failed (unreachable, or it refused
// the lease's credentials).
func (g *Gateway) connect(ctx context.Context, addr, auth, authority string) (_ net.Conn, _ *bufio.Reader, _ *Error, siteRefused bool) {
	if up := g.warm.take(addr); up != nil {
		br, gerr, siteRefused, stale := g.handshake(up, addr, auth, authority)
		if !stale {
			return up, br, gerr, siteRefused
		}
		// The proxy closed it before the CONNECT: a new connection.
	}
	dctx, cancel := context.WithTimeout(ctx, g.opts.DialTimeout)
	defer cancel()
	up, err := g.dialer.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, nil, upstreamDialError(addr, err), false
	}
	br, gerr, siteRefused, _ := g.handshake(up, addr, auth, authority)
	return up, br, gerr, siteRefused
}

// handshake sends the CONNECT on up and reads the proxy's answer; on an
// error it closes up, and stale says the connection had ended before the
// proxy answered a byte (a warm connection the proxy closed).
func (g *Gateway) handshake(up net.Conn, addr, auth, authority string) (_ *bufio.Reader, _ *Error, siteRefused, stale bool) {
	_ = up.SetDeadline(time.Now().Add(g.opts.DialTimeout))
	req := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(up, req+"\r\n"); err != nil {
		up.Close()
		return nil, &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("the leased proxy %s: %v", addr, err)}, false, true
	}
	answer := &countingReader{r: up}
	br := bufio.NewReaderSize(answer, 1024)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		up.Close()
		return nil, &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("the leased proxy %s did not answer the CONNECT: %v", addr, err)}, false, answer.n == 0 && !isTimeout(err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusProxyAuthRequired:
		up.Close()
		return nil, &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("the leased proxy %s refused the lease's credentials (407)", addr)}, false, false
	case resp.StatusCode/100 != 2:
		up.Close()
		return nil, &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("CONNECT %s through %s: the proxy answered %s", authority, addr, resp.Status)}, true, false
	}
	_ = up.SetDeadline(time.Time{})
	return br, nil, false, false
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
