// Package healthtest holds test helpers for the health engine: an in-process
// HTTP forward proxy supporting CONNECT, standing in for Squid in probe unit
// tests and in the 2,000-proxy benchmark. It serves on loopback only and is
// imported by tests, never by the product.
//
// It imports only the standard library.
package healthtest
