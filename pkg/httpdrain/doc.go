// Package httpdrain shuts a net/http server down without waiting for the
// connections on which no request began (Tracker): the operator's HTTP
// lease API and its gateway both stop within their shutdown budgets while
// clients hold spare connections to them, so a handover is not held for
// net/http's 5 s rule.
//
// It imports only the standard library.
package httpdrain
