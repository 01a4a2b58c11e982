// Package leaseid makes lease IDs a holder can prove: an ID carries the
// lease it names (proxy, holder, flow, target, grant time, TTL) and an HMAC
// over it, so that after a crash a lease the last checkpoint missed can be
// rebuilt from its ID alone and re-admitted (pkg/lease Store.Readmit).
//
// It owns the ID's encoding (lowercase base32, a valid Kubernetes name of
// at most 253 characters) and the signing key's Secret (created on first
// start). It implements lease.IDMaker; it must not import pkg/leasing,
// pkg/discovery, pkg/apiserver, sigs.k8s.io/controller-runtime/pkg/client or
// sigs.k8s.io/controller-runtime/pkg/manager (it only logs through
// controller-runtime's logger).
package leaseid
