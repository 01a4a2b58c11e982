// Package gatewaybench measures the gateway (pkg/gateway) against the same
// Squid it leases, side by side in one run: CONNECT throughput with 1 MiB
// bodies at 64 clients, the time a new tunnel takes (its lease included),
// and the memory of idle tunnels. The gateway, the HTTP lease API it leases
// through and the lease store run in the benchmark's process; the clients
// and the TLS origin run in a child process (this test binary again), and
// each Squid in its own. Everything is on loopback (127.0.14.0/24 for the
// Squids). Run: make bench-gateway (figures in docs/benchmarks.md).
package gatewaybench
