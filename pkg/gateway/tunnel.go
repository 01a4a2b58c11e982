package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
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
		n := pipe(conn, up, g.buffers)
		g.rec.GatewayBytes("down", n)
		errc <- struct{}{}
	}()
	n := pipe(up, conn, g.buffers)
	g.rec.GatewayBytes("up", n)
	<-errc
}

// pipe copies src to dst until src ends, then closes dst's write side so
// the other direction can finish. An idle tunnel holds no buffer and no
// pipe: the read takes a pooled buffer only while it reads, and gives it
// back before it waits for src to be readable (readPooled). Each chunk costs
// one read and one write, and a wait one read more. (io.Copy between TCP
// connections would splice(2), but holds a pipe — two descriptors — per
// direction while it waits, tripling an idle tunnel's descriptors.)
func pipe(dst, src net.Conn, pool *sync.Pool) int64 {
	var n int64
	raw, _ := rawConn(src)
	for {
		var buf *[]byte
		var r int
		var rerr error
		if raw != nil {
			buf, r, rerr = readPooled(raw, pool)
		} else {
			buf = pool.Get().(*[]byte)
			r, rerr = src.Read(*buf)
		}
		if r > 0 {
			w, werr := dst.Write((*buf)[:r])
			n += int64(w)
			if werr != nil {
				pool.Put(buf)
				break
			}
		}
		if buf != nil {
			pool.Put(buf)
		}
		if rerr != nil {
			break
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
	return n
}

// readPooled reads what c holds into a buffer from pool, waiting for c to be
// readable if it holds nothing yet — without a buffer: the buffer goes back
// to the pool before each wait. It returns the buffer (nil on an error
// before any read), the bytes read and io.EOF at the end.
func readPooled(c syscall.RawConn, pool *sync.Pool) (*[]byte, int, error) {
	var buf *[]byte
	var n int
	var err error
	if cerr := c.Read(func(fd uintptr) bool {
		if buf == nil {
			buf = pool.Get().(*[]byte)
		}
		for {
			n, err = syscall.Read(int(fd), *buf)
			if err != syscall.EINTR {
				break
			}
		}
		if err == syscall.EAGAIN {
			pool.Put(buf)
			buf = nil
			return false // wait for readable, holding nothing
		}
		return true
	}); cerr != nil {
		return buf, 0, cerr
	}
	switch {
	case err != nil:
		return buf, 0, err
	case n == 0:
		return buf, 0, io.EOF
	}
	return buf, n, nil
}

// copyBufferSize is a pooled relay buffer's size.
const copyBufferSize = 128 << 10

func newBufferPool() *sync.Pool {
	return &sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}
}

func rawConn(c net.Conn) (syscall.RawConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a syscall.Conn")
	}
	return sc.SyscallConn()
}

// connect opens a tunnel to authority through the proxy at addr. On an
// error, siteRefused says the proxy answered that the site refused (to be
// reported); otherwise the proxy itself failed (unreachable, or it refused
// the lease's credentials).
func (g *Gateway) connect(ctx context.Context, addr, auth, authority string) (_ net.Conn, _ *bufio.Reader, _ *Error, siteRefused bool) {
	dctx, cancel := context.WithTimeout(ctx, g.opts.DialTimeout)
	defer cancel()
	up, err := g.dialer.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, nil, upstreamDialError(addr, err), false
	}
	_ = up.SetDeadline(time.Now().Add(g.opts.DialTimeout))
	req := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(up, req+"\r\n"); err != nil {
		up.Close()
		return nil, nil, &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("the leased proxy %s: %v", addr, err)}, false
	}
	br := bufio.NewReaderSize(up, 1024)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		up.Close()
		return nil, nil, &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("the leased proxy %s did not answer the CONNECT: %v", addr, err)}, false
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusProxyAuthRequired:
		up.Close()
		return nil, nil, &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("the leased proxy %s refused the lease's credentials (407)", addr)}, false
	case resp.StatusCode/100 != 2:
		up.Close()
		return nil, nil, &Error{Reason: ReasonUpstream, Message: fmt.Sprintf("CONNECT %s through %s: the proxy answered %s", authority, addr, resp.Status)}, true
	}
	_ = up.SetDeadline(time.Time{})
	return up, br, nil, false
}
