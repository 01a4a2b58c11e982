package httpdrain

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Tracker tracks the connections on which no request has begun
// (http.StateNew), so that a shutdown need not wait for them. net/http's
// Shutdown counts such a connection as idle only once it is 5 s old, and Go's
// transport leaves exactly such connections in its pool: one it dialed for a
// request that another connection served first. At a handover that held the
// old leader's shutdown, and so the new leader's start, for those 5 s.
//
// Use one Tracker per server: its ConnState as the server's ConnState hook,
// its Shutdown in place of the server's.
//
// Only a connection unused for unusedAge and with nothing waiting to be read
// is closed: a TLS handshake under way leaves the connection "new" for the
// milliseconds it takes, with nothing to read between the client's flights,
// and such a client is about to send its request.
type Tracker struct {
	// n mirrors len(conns), so that the hook costs a request one atomic load
	// when there is nothing to forget.
	n  atomic.Int64
	mu sync.Mutex
	// conns holds when each connection was accepted.
	conns map[net.Conn]time.Time
	now   func() time.Time
}

// unusedAge: far longer than a handshake takes on a live connection, far
// shorter than net/http's 5 s.
const unusedAge = time.Second

// New returns a Tracker that reads the time from now.
func New(now func() time.Time) *Tracker {
	return &Tracker{conns: map[net.Conn]time.Time{}, now: now}
}

// ConnState is the server's ConnState hook.
func (u *Tracker) ConnState(c net.Conn, state http.ConnState) {
	if state != http.StateNew && u.n.Load() == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if state == http.StateNew {
		u.conns[c] = u.now()
	} else {
		delete(u.conns, c)
	}
	u.n.Store(int64(len(u.conns)))
}

// closeSilent closes the connections unused for unusedAge whose client has
// sent nothing the server has not read yet, and returns how many it closed.
// One with bytes waiting (a request, or the rest of a TLS handshake, that
// the server is about to read) is left to become active and be answered.
func (u *Tracker) closeSilent() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	closed, now := 0, u.now()
	for c, accepted := range u.conns {
		if now.Sub(accepted) < unusedAge {
			continue
		}
		raw := c
		if tc, ok := c.(*tls.Conn); ok {
			raw = tc.NetConn()
		}
		if pending(raw) {
			continue
		}
		// The raw connection: closing a TLS one could block on its alert.
		_ = raw.Close()
		delete(u.conns, c)
		closed++
	}
	u.n.Store(int64(len(u.conns)))
	return closed
}

// pending says whether c has bytes to read. It peeks without taking c's read
// lock, which the server's goroutine holds while it waits on c; a connection
// it cannot look into counts as pending (left to Shutdown's own rule).
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	has := true
	if err := raw.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing yet (EAGAIN) is silent; bytes, the client's close (0) or
		// an error are for the server's goroutine to see.
		has = err != syscall.EAGAIN
	}); err != nil {
		return true
	}
	return has
}

// Shutdown runs srv.Shutdown(ctx) and, while it waits, closes the silent
// unused connections (closeSilent) every pollInterval: one whose handshake
// was under way at the first pass may fall silent at a later one. It returns
// what srv.Shutdown returns: ctx's error when active requests outlast it.
func (u *Tracker) Shutdown(ctx context.Context, srv *http.Server) error {
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			u.closeSilent()
		}
	}
}

// pollInterval is how often shutdown looks for silent connections: well
// under the 5 s it saves, about net/http's own polling of idle ones.
const pollInterval = 50 * time.Millisecond
