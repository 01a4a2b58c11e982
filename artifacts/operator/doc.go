// Package operator embeds the example manifests that deploy the operator
// (Namespace, ServiceAccount, bindings to the generated RBAC, Deployment, the
// discovery API's Service) so tests can check them against the API server and
// the binary's flags.
//
// It owns only the embedded files; it must not import pkg/ or apis/.
package operator
