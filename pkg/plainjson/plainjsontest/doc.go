// Package plainjsontest holds what the tests of every hand-written JSON path
// share (pkg/plainjson's callers hold themselves to encoding/json): the
// strings whose encoding has rules, and a randfill function that mixes them
// into filled objects.
//
// It imports nothing of the module.
package plainjsontest
