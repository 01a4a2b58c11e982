// Package logtail gives the last lines of a log, a string or a file, for
// test failure messages. It is a leaf: it imports nothing of the module, so
// the control plane and node agent fixtures can use it as well as tests.
package logtail
