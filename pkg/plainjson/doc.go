// Package plainjson reads and writes the plain subset of JSON that the
// operator's hot paths carry — objects whose keys and string values are
// printable ASCII without escapes, integers, string maps — without
// reflection, for the callers that measured encoding/json as a large share
// of a request's cost (the lean ProxyLease path, the HTTP lease API, the
// lease checkpoint).
//
// It owns the rules that keep such a fast path exact: the Scanner refuses
// (reports false on) anything outside the plain subset, so that its caller
// hands that input to the strict decoder it stands in for; AppendString
// writes what encoding/json writes for every string. Each caller holds its
// own fast path to the library it replaces with a test.
//
// It imports only the standard library.
package plainjson
