// Package e2e tests the whole system on one machine: a real kube-apiserver
// (test/controlplane), the operator in-process (cmd/proxy-operator/app), the
// local node agent (test/nodeagent) and real Squid processes on 127.0.0.N.
//
// One environment is shared by the package's tests (TestMain): the operator
// registers its metrics on controller-runtime's global registry and can run
// once per process. TestMain fails the run if a squid child outlives the
// environment.
//
// BenchmarkFleetProvisioning measures the time from N Proxies applied to all
// Provisioned (E2E_FLEET_SIZE, default 100):
//
//	go test ./test/e2e -run '^$' -bench FleetProvisioning -benchtime 1x -v
//
// E2E_KEEP_LOGS=1 keeps the operator's and the agent's logs (the path is
// printed); they are shown anyway when a test fails.
//
// This package holds tests only; nothing may import it.
package e2e
