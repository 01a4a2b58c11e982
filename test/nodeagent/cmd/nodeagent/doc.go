// Command nodeagent runs the local node agent (package nodeagent) against the
// cluster of a kubeconfig until interrupted: it registers a Node and runs
// Debian's squid for the operator's pods on 127.0.0.N:3128.
//
//	go run ./test/nodeagent/cmd/nodeagent --kubeconfig .dev/kubeconfig --bind
package main
