// Package version says which build of proxy-operator is running: the version
// and revision the build stamps in with -ldflags -X (make image), else what
// the Go toolchain recorded of the source (go build in a checkout).
//
// It imports nothing of the module.
package version
