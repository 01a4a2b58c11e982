// Package importrules holds the test that keeps the walls between packages
// standing: every doc.go that says "must not import …", "imports only the
// standard library" or "imports nothing of the module" is read, and each
// package's non-test imports are checked against what it says. A rule
// written in a doc.go is thus enforced without being written twice.
//
// A forbidden name is a module-relative path (pkg/lease, cmd, apis/), which
// forbids that package and everything under it, or an import path outside
// the module (sigs.k8s.io/controller-runtime, github.com/prometheus), which
// forbids that path and everything under it. Words that are neither (the
// front doors, concrete providers) are not rules: doc.go sentences name
// paths so that the test can hold them.
//
// It imports only the standard library and has no production code.
package importrules
