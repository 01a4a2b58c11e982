// Package httpdraintest holds the check every server that shuts down
// through an httpdrain.Tracker passes in its own tests (the HTTP lease API,
// the gateway): a client's silent connection does not hold its Serve.
//
// It imports nothing of the module.
package httpdraintest
