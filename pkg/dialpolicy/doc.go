// Package dialpolicy is the one policy of what the operator itself may
// dial on a tenant's behalf: the proxies its health probes go through (and
// the URLs they ask them for), and the leased proxies the gateway forwards
// to. Whoever may create a Proxy chooses its address; without this the
// operator would connect, with its own network position, to what that
// tenant cannot reach (instance metadata, the API server).
//
// It owns the Denylist (--health-denied-cidrs and the API server's
// endpoints), checked on the address actually dialled (a net.Dialer
// Control, after resolution, so a name cannot hide an address), and the
// typed error of a refused dial (IsDenied).
//
// It imports only the standard library.
package dialpolicy
