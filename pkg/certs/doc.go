// Package certs issues and rotates the operator's own TLS: a CA and a serving
// certificate kept in one Secret of the operator's namespace, shared by every
// replica, so that an install needs no Secret made by hand.
//
// It owns:
//   - KeyPair, NewCA and KeyPair.Issue: ECDSA P-256 certificates,
//   - the rotation rule (a certificate is renewed after two thirds of its
//     life; a renewed CA stays in the bundle until it expires),
//   - Manager: reads or creates the Secret, renews what is due, publishes the
//     CA bundle into the APIService's spec.caBundle and a ConfigMap, and
//     serves the current pair as a dynamiccertificates.CertKeyContentProvider
//     (the aggregated API server and the HTTP discovery API both take one),
//   - Options: the --serving-cert-* flags.
//
// Must not import: other packages of this project (the servers take the
// Manager through k8s.io/apiserver's CertKeyContentProvider interface), or
// controller-runtime's cached client (Secrets are read directly, so the
// operator never caches every Secret of the cluster).
package certs
