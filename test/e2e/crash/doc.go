// Package crash proves that no instance leaks and none is duplicated
// whatever moment the operator dies at. It builds bin-style the real
// operator binary, runs it as its own process against a real control plane
// and the Compute Engine fake (test/gcefake) failing 20 % of all calls with
// transient errors, and SIGKILLs it at a random moment while 20 Proxies are
// being created, edited (replaced) and deleted. After a restart, once the
// fleet has settled and the orphan collector has completed a sweep, the
// fake's instances must be exactly the live Proxies': one per Proxy, in its
// zone, and nothing else.
//
// TestCrashRestart is one random kill point (part of make test; the seed is
// logged and CRASH_SEED=<n> repeats it). BenchmarkCrashRestart repeats it
// with a new seed per iteration and prints the counts of every run:
//
//	go test ./test/e2e/crash -run '^$' -bench CrashRestart -benchtime 20x -v
//
// This package holds tests only; nothing may import it.
package crash
