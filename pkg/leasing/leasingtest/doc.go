// Package leasingtest holds a fake of the leasing Service's wait queue for
// the front doors' tests: it answers at once from a real lease store,
// records every call and can be told the next answer. Production code must
// not use it; it imports pkg/leasing, pkg/lease and the standard library.
package leasingtest
