package provider

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Labels and tags that mark what this operator owns. Providers store them on
// the instance (Pod labels, GCP labels after translating to GCP's key syntax)
// and read them back into Instance.Tag and Instance.OwnerUID.
const (
	// OwnerUIDLabel carries the owning Proxy's UID: the proof of ownership
	// garbage collection requires before deleting an instance.
	OwnerUIDLabel = "crawl.example.com/proxy-uid"
	// TagLabel carries CreateRequest.Tag; ListByTag selects on it.
	TagLabel = "crawl.example.com/managed-by"
	// SpecHashLabel carries CreateRequest.SpecHash.
	SpecHashLabel = "crawl.example.com/spec-hash"
	// DefaultTag is the tag of tests and of deployments before tags were
	// derived per installation (InstallationTag); a deployment that must
	// keep finding the instances it tagged so passes it as --instance-tag.
	DefaultTag = "proxy-operator"
)

// InstallationTag is the instance tag of the installation in namespace of
// the cluster whose kube-system namespace has UID clusterUID: DefaultTag,
// "-" and 12 hex digits of SHA-256 of both. Installations in other
// namespaces or other clusters never share it, so no garbage collector
// lists, let alone deletes, another installation's instances; the same
// installation gets the same tag after every restart and upgrade. 27
// characters of [a-z0-9-]: a label value of Kubernetes and of GCE.
func InstallationTag(clusterUID types.UID, namespace string) string {
	sum := sha256.Sum256([]byte(string(clusterUID) + "/" + namespace))
	return DefaultTag + "-" + hex.EncodeToString(sum[:6])
}

// namePrefix starts every generated instance name with a letter, as GCP
// requires.
const namePrefix = "proxy-"

// nameHashChars is 16 base32 characters: 80 bits of the hash, far from
// birthday collisions at fleets of tens, and exactly 10 bytes so no padding.
const nameHashChars = 16

// NameFromUID returns the deterministic instance name of the Proxy with the
// given UID: "proxy-" followed by the first 16 characters of the lowercase,
// unpadded base32 (RFC 4648) encoding of SHA-256(uid). The result is 22
// characters of [a-z2-7-], legal as a GCP resource name and as a Pod name.
//
// Determinism is what makes Create idempotent across reconciler crashes: a
// retried Create names the same instance, and a replacement reuses the name of
// the instance it replaces (so it must wait for that one to be gone).
func NameFromUID(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	enc := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:nameHashChars*5/8])
	return namePrefix + strings.ToLower(enc)
}
