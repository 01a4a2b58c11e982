// Package framework holds the fixtures that several integration test packages
// share: Env and Main, the one way every test package's TestMain starts its
// environment and stops it (in reverse order, logs shown and kept on a
// failure, no squid left behind); a control plane whose operator identity is
// bound to nothing but the
// generated ClusterRole, per-test namespaces the operator may act in, a
// goroutine-safe log buffer, and the checker of lease histories
// (CheckHistory: a proxy held by two clients at once) that the failover and
// checkpoint fault tests share.
//
// It is test tooling: it may import anything of the module, and nothing but
// tests under test/ may import it.
package framework
