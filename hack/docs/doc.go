// Package docs holds the test that keeps the prose in step with the code:
// README.md, CONTRIBUTING.md, docs/*.md and the Python client's README may
// only name operator flags the binary defines (or another tool's, listed in
// the test), make targets the Makefile has, and repository paths and
// links that exist. Metric names are held to what a running operator exports
// by test/e2e/dev, which has one.
//
// It has no production code; nothing may import it.
package docs
