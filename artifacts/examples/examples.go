package examples

import "embed"

// Fleet holds fleet/*.yaml: two Managed "kubernetes" proxies, two Managed
// "gcp" proxies and the labelled cloud-init Secret they reference. go:embed can only initialise a
// package-level variable; embed.FS is read-only, so this is not mutable state.
//
//go:embed fleet/*.yaml
var Fleet embed.FS

// All holds every example: fleet/*.yaml and the top-level *.yaml files.
//
//go:embed *.yaml fleet/*.yaml
var All embed.FS
