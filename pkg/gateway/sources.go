package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"
	"syscall"
)

// sourceLimit bounds, per source address, the client connections that have
// not yet authenticated (no request on them leased): a client without a
// token cannot hold more than that many of the gateway's descriptors. A
// connection stops counting once one of its requests leased (the token's
// own bounds then apply) or it closes.
type sourceLimit struct {
	max int

	mu      sync.Mutex
	pending map[string]int
}

// listen wraps ln: a connection over its source's bound is closed as it is
// accepted.
func (s *sourceLimit) listen(ln net.Listener) net.Listener {
	return &sourceListener{Listener: ln, s: s}
}

type sourceListener struct {
	net.Listener
	s *sourceLimit
}

func (l *sourceListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c.RemoteAddr())
		l.s.mu.Lock()
		over := l.s.pending[src] >= l.s.max
		if !over {
			l.s.pending[src]++
		}
		l.s.mu.Unlock()
		if over {
			_ = c.Close()
			continue
		}
		return &sourceConn{Conn: c, s: l.s, src: src}, nil
	}
}

// sourceOf is the host of a remote address.
func sourceOf(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// sourceConn is an accepted connection, counted against its source until
// authenticated or closed.
type sourceConn struct {
	net.Conn
	s    *sourceLimit
	src  string
	once sync.Once
}

// authenticated stops counting c against its source.
func (c *sourceConn) authenticated() {
	c.once.Do(func() {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		if c.s.pending[c.src]--; c.s.pending[c.src] <= 0 {
			delete(c.s.pending, c.src)
		}
	})
}

func (c *sourceConn) Close() error {
	c.authenticated()
	return c.Conn.Close()
}

// SyscallConn and CloseWrite are the accepted connection's: a tunnel's relay
// reads its descriptor and half-closes it.
func (c *sourceConn) SyscallConn() (syscall.RawConn, error) { return rawConn(c.Conn) }

func (c *sourceConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

type sourceConnKey struct{}

// withSourceConn is the server's ConnContext: requests can tell their
// connection authenticated.
func withSourceConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, sourceConnKey{}, c)
}

// authenticatedConn stops counting the connection of r against its source.
func authenticatedConn(r *http.Request) {
	if c, ok := r.Context().Value(sourceConnKey{}).(*sourceConn); ok {
		c.authenticated()
	}
}
