// Command proxy-operator runs the whole operator on one controller-runtime
// manager: the Proxy reconciler and its providers, the health engine, the
// lease store with its wait queue, the HTTP discovery API and the aggregated
// ProxyLease API server. All wiring lives in package app; main only parses
// flags, sets up logging and signals, and reports.
package main
