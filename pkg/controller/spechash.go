package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// specHashInput is what an instance is built from. Attributes, the health
// check and the endpoint are deliberately absent: changing them must not
// replace a running instance. The resolved cloud-init data is present (not
// the reference to it), so rotating a Secret's content replaces instances
// and renaming a Secret with the same content does not.
//
// omitempty everywhere keeps hashes stable when optional fields are added to
// the provider blocks: a new zero-valued field does not change the JSON.
type specHashInput struct {
	Provider   string                                `json:"provider,omitempty"`
	Kubernetes *crawlv1alpha1.KubernetesProviderSpec `json:"kubernetes,omitempty"`
	GCP        *crawlv1alpha1.GCPProviderSpec        `json:"gcp,omitempty"`
	CloudInit  string                                `json:"cloudInit,omitempty"`
	// ProxyAuth is a digest of the instance's proxy auth configuration
	// (its key, where it polls, the CA): a rotated key replaces instances.
	ProxyAuth string `json:"proxyAuth,omitempty"`
}

// SpecHash returns the hex SHA-256 of the provider-relevant parts of spec and
// the resolved cloud-init data: the value of the spec-hash annotation. JSON
// encoding sorts map keys, so the hash is deterministic.
func SpecHash(spec *crawlv1alpha1.ProxySpec, cloudInit string, proxyAuth []byte) string {
	in := specHashInput{CloudInit: cloudInit}
	if len(proxyAuth) > 0 {
		sum := sha256.Sum256(proxyAuth)
		in.ProxyAuth = hex.EncodeToString(sum[:])
	}
	if spec != nil {
		in.Provider = spec.Provider
		in.Kubernetes = spec.Kubernetes
		in.GCP = spec.GCP
	}
	// Marshalling plain structs, strings and maps cannot fail.
	b, _ := json.Marshal(in)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
