// Package fake is an in-memory provider.Provider for tests: it records every
// call, can fail the next call(s) of an operation with an injected error, and
// lets tests drive instance states (automatically after a number of Gets, or
// explicitly with SetState/SetIP).
//
// It passes the providertest contract suite; pkg/provider/fake's tests prove
// it and run the suite's negative controls.
//
// It is for tests only: it imports pkg/provider, the API types and k8s.io
// utilities, and no production code uses it.
package fake
