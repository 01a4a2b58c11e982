// Package tunneltest opens CONNECT tunnels through a proxy under test (a
// Squid, the relay, the gateway) to an echo server on loopback, and tells
// whether bytes still cross them: the checks that a lease's end ends its
// traffic.
//
// It imports the standard library only, so that tests of pkg/ and test/
// alike can use it.
package tunneltest
