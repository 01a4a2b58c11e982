package proxies

import "embed"

// FS holds the manifests. go:embed can only initialise a package-level
// variable; embed.FS is read-only, so it is not mutable state.
//
//go:embed *.yaml
var FS embed.FS
