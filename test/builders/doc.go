// Package builders makes the API objects tests create, in the style of
// kueue's wrappers: a builder per kind that starts from the object's name,
// methods that each set one part and return the builder, and Obj for a copy
// of the object. Tests say what differs and nothing else.
//
// It must not import pkg/, cmd/ or test/: only apis/ and the Kubernetes
// API types, so that tests of pkg/ and test/ alike can use it.
package builders
