// Package operator embeds the example manifests that deploy the operator
// (Namespace, ServiceAccount, bindings to the generated RBAC, Deployment, the
// discovery API's Service) so tests can check them against the API server and
// the binary's flags.
//
// It owns only the embedded files; it must not import pkg/ or apis/.
package operator

import "embed"

// FS holds operator.yaml. go:embed can only initialise a package-level
// variable; embed.FS is read-only, so it is not mutable state.
//
//go:embed *.yaml
var FS embed.FS
