// Package gatewaybench measures the gateway (pkg/gateway) against the same
// Squid it leases, side by side in one run: CONNECT throughput with 1 MiB
// bodies at 64 clients, the time a new tunnel takes (its lease included),
// and the memory of idle tunnels. Two gateways — one leasing in process, as
// on the replica that serves leases, one through the HTTP lease API, as on
// any other — the API and the lease store run in the benchmark's process,
// beside a bare TCP hop in front of the same Squid (what any relay there
// costs before it does anything); the clients
// and the TLS origin run in a child process (this test binary again), and
// each Squid in its own. Everything is on loopback (127.0.14.0/24 for the
// Squids). Run: make bench-gateway (figures in docs/benchmarks.md).
package gatewaybench
