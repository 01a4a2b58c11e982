// Package cputime reads the CPU time benchmarks divide by their work: this
// process's and another process's (a kube-apiserver, a Squid). It is a leaf:
// it imports nothing of the module.
package cputime
