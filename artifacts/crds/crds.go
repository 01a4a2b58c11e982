package crds

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// FS holds every CRD manifest of this directory (<group>_<plural>.yaml, not
// kustomization.yaml). go:embed can only
// initialise a package-level variable; nothing writes to it (embed.FS is
// read-only), so it is not mutable state.
//
//go:embed *_*.yaml
var FS embed.FS

// CRDs decodes every manifest in FS, sorted by file name. Each call returns
// fresh objects that the caller may modify.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(FS, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing embedded CRDs: %w", err)
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		raw, err := FS.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("reading embedded CRD %s: %w", name, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("decoding embedded CRD %s: %w", name, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("decoding embedded CRD %s: kind is %q, not CustomResourceDefinition", name, crd.Kind)
		}
		out = append(out, crd)
	}
	return out, nil
}
