// Command dev is `make dev`: it brings up the local development environment
// in the foreground, runs until SIGINT/SIGTERM, then tears it down.
//
// It leaves its contract under .dev/ at the repository root (tests and
// scripts rely on it): kubeconfig (admin credentials embedded) and ready,
// present only while everything is up. Later components add discovery-token
// and discovery-url.
//
// The environment is a list of components started in order and stopped in
// reverse; the operator and the node agent join that list as they are built.
// As the top-level wiring it may import any package of the module; nothing
// may import it.
package main
