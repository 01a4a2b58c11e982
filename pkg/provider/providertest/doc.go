// Package providertest is the contract suite every provider.Provider runs
// against itself:
//
//	func TestContract(t *testing.T) {
//		providertest.Run(t, providertest.Harness{
//			New: func(t providertest.T) provider.Provider { return newProviderForTest(t) },
//		})
//	}
//
// Each case is a subtest. Besides the behaviour a case is about, every call the
// suite makes goes through a checker that enforces the invariants of the
// contract on all results (errors explicitly classified, Delete never
// NotFound, a successful Get returns the asked-for instance in a known state,
// Running has an IP, CreatedAt is set, ListByTag returns only the asked tag).
//
// Negative controls: the suite must also fail providers that break the
// contract. Cases are written against the small interface T (the part of
// testing.TB they use) instead of *testing.T, so Check can run the same cases
// against a recording T and return the violations instead of failing the
// calling test. A test then asserts that a deliberately broken provider makes
// the expected cases fail (see pkg/provider/fake's tests).
//
// Names and tags are random per case, and every instance the suite creates is
// deleted in a cleanup, so the suite can run against a shared real backend.
//
// This package is test support: it may import testing, pkg/provider and
// k8s.io utilities, never a concrete provider.
package providertest
