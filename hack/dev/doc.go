// Command dev is `make dev`: it brings up the local development environment
// in the foreground, runs until SIGINT/SIGTERM, then tears it down in
// reverse order and checks that no process it started is left.
//
// The environment itself — control plane, node agent, origin server,
// operator, APIService registration, sample fleet — is package
// test/devenv, which the dev e2e test (test/e2e/dev) starts the same way.
// This command adds what only the interactive run needs: the .dev/ directory
// at the repository root with its lock (one `make dev` per checkout), signal
// handling, the parent-death signal, a logger for its own controller-runtime
// and klog output (.dev/logs/dev.log; each operator process logs to
// .dev/logs/operator*.log), the port flags (-free-ports, -discovery-port, …;
// see -h), -operators N and the banner saying how to reach everything.
//
// It leaves the contract of test/devenv under .dev/: kubeconfig,
// discovery-token, discovery-url, ca.crt and ready (present only while
// everything is up and the sample fleet is Ready).
//
// As the top-level wiring it may import any package of the module; nothing
// may import it.
package main
