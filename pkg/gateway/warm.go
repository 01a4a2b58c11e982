package gateway

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// warmConns keeps one connection dialled ahead to each proxy a tunnel went
// through lately, so that the next tunnel through it does not wait for a
// TCP handshake (Envoy's preconnect). Nothing is sent on a warm connection
// before a tunnel takes it: it carries no lease's credentials, and a tunnel
// of any lease of that proxy may take it. One left unused for warmIdle is
// closed (Squid logs it as error:transaction-end-before-headers: at most one
// line per proxy each time the gateway's traffic to it stops).
type warmConns struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
	now  func() time.Time

	mu      sync.Mutex
	conns   map[string]warmConn
	filling map[string]bool
	closed  bool
}

type warmConn struct {
	c      net.Conn
	dialed time.Time
}

const (
	// warmIdle closes a warm connection no tunnel took this long.
	warmIdle = 10 * time.Second
	// maxWarm bounds the warm connections (one per proxy) at once.
	maxWarm = 1024
)

func newWarmConns(dial func(ctx context.Context, addr string) (net.Conn, error), now func() time.Time) *warmConns {
	return &warmConns{dial: dial, now: now, conns: map[string]warmConn{}, filling: map[string]bool{}}
}

// take is the warm connection to addr, nil if there is none that is still
// open, and dials the next one for addr in the background.
func (w *warmConns) take(addr string) net.Conn {
	w.mu.Lock()
	wc, ok := w.conns[addr]
	delete(w.conns, addr)
	w.fillLocked(addr)
	w.mu.Unlock()
	if !ok {
		return nil
	}
	if !quiet(wc.c) {
		// The proxy closed it (or sent something it never should).
		_ = wc.c.Close()
		return nil
	}
	return wc.c
}

// fillLocked dials a warm connection to addr unless one is there or on
// its way. Called under w.mu.
func (w *warmConns) fillLocked(addr string) {
	if w.closed || w.filling[addr] || len(w.conns)+len(w.filling) >= maxWarm {
		return
	}
	if _, ok := w.conns[addr]; ok {
		return
	}
	w.filling[addr] = true
	go func() {
		c, err := w.dial(context.Background(), addr)
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.filling, addr)
		if err != nil {
			return
		}
		if _, ok := w.conns[addr]; ok || w.closed {
			_ = c.Close()
			return
		}
		w.conns[addr] = warmConn{c: c, dialed: w.now()}
	}()
}

// expire closes the warm connections no tunnel took for warmIdle.
func (w *warmConns) expire() {
	now := w.now()
	var stale []net.Conn
	w.mu.Lock()
	for addr, wc := range w.conns {
		if now.Sub(wc.dialed) >= warmIdle {
			stale = append(stale, wc.c)
			delete(w.conns, addr)
		}
	}
	w.mu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
}

// close closes every warm connection and dials no more.
func (w *warmConns) close() {
	w.mu.Lock()
	conns := w.conns
	w.conns, w.closed = map[string]warmConn{}, true
	w.mu.Unlock()
	for _, wc := range conns {
		_ = wc.c.Close()
	}
}

// quiet reports whether c is open and the peer sent nothing: a look at the
// socket that does not wait (a proxy that closed an idle connection left
// an end of stream or a reset there).
func quiet(c net.Conn) bool {
	raw, err := rawConn(c)
	if err != nil {
		return true
	}
	open := false
	var b [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN
		return true
	})
	return open
}
