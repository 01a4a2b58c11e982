// Package gateway serves one forward-proxy address in front of the fleet
// (docs/gateway.md): a client sends its requests (plain HTTP in absolute
// form, or CONNECT tunnels) to the gateway with its HTTP API token as the
// Proxy-Authorization password and its options in the username
// (username.go); the gateway leases a proxy for each request, or one per
// sticky session (holding.go), reaches the proxy with the lease's
// credentials, and releases the lease when the request ends.
//
// It leases through the HTTP lease API with the client's own token (the
// Leaser, leaser.go), so that authentication, namespaces, priorities and fair
// queues are the lease API's and no rule is decided twice; every replica
// serves the gateway and the API's Service routes its leases to the leader.
// On the replica that serves leases, the same API answers them in process
// (local.go, with discovery.InProcess: its token check and answers, without
// HTTP or JSON) rather than through the Service back to itself.
// Every answer of the gateway's own is written by one function (errors.go).
// A tunnel's CONNECT goes on a connection dialled ahead to its proxy when
// there is one (warm.go); its bytes are spliced between the sockets through
// pooled kernel pipes, or copied through pooled buffers (relay.go). It never
// decrypts a tunnel.
//
// It must not import pkg/leasing, pkg/lease, pkg/flowcontrol, pkg/metrics or
// cmd: its one way to leases is the Leaser; pkg/discovery/client and wire
// are the API's client and bodies.
package gateway
