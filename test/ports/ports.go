// Package ports is the one free-port facility of the tests and the dev
// environment: TCP ports on 127.0.0.1 for components that take an address
// rather than a listener. It imports only the standard library.
package ports

import (
	"fmt"
	"net"
	"slices"
	"strconv"
)

// One returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a component that takes an address rather than a listener. A test that
// needs several ports takes them from one Free call.
func One() (int, error) {
	ports, err := Free(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Free returns n different TCP ports on 127.0.0.1, none of them in
// taken (ports picked earlier and not bound yet), that were free a moment
// ago: a Reservation released on return. Another process can still take
// one before its user binds it.
func Free(n int, taken ...int) ([]int, error) {
	var r Reservation
	defer r.Release()
	ports := make([]int, 0, n)
	// Every pick differs from those held, so at most len(taken) are skipped.
	for len(ports) < n {
		p, err := r.Reserve(0)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(taken, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// Reservation holds TCP ports on 127.0.0.1 for processes that bind them
// a moment later. Every port stays bound until Release, so the ports of one
// reservation are different (picking a free port, closing it and picking
// again can return the same port).
type Reservation struct{ held []net.Listener }

// Reserve binds port, or a free port when port is 0, until Release, and
// returns it.
func (r *Reservation) Reserve(port int) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("listening on 127.0.0.1:%d (choose another port, or 0 for a free one): %w", port, err)
	}
	r.held = append(r.held, ln)
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Release unbinds every reserved port; it may be called more than once.
func (r *Reservation) Release() {
	for _, ln := range r.held {
		_ = ln.Close()
	}
	r.held = nil
}
