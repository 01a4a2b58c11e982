package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side-apply field manager of everything applied
// by this package.
const FieldManager = "proxy-operator-controlplane"

// InstallCRDs applies every CustomResourceDefinition found in the *.yaml and
// *.yml files of fsys and waits until each is Established. Any other kind in
// those files is an error.
func InstallCRDs(ctx context.Context, cfg *rest.Config, fsys fs.FS) error {
	files, err := yamlFiles(fsys)
	if err != nil {
		return err
	}
	a, err := newApplier(cfg)
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			return fmt.Errorf("reading CRD file %s: %w", f, err)
		}
		objs, err := decodeYAML(data)
		if err != nil {
			return fmt.Errorf("decoding CRD file %s: %w", f, err)
		}
		for _, obj := range objs {
			if obj.GetKind() != "CustomResourceDefinition" {
				return fmt.Errorf("CRD file %s: unexpected kind %q (name %q)", f, obj.GetKind(), obj.GetName())
			}
			if _, err := a.apply(ctx, obj); err != nil {
				return fmt.Errorf("installing CRDs from %s: %w", f, err)
			}
			names = append(names, obj.GetName())
		}
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating apiextensions client: %w", err)
	}
	for _, name := range names {
		if err := waitEstablished(ctx, client, name); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, client apiextensionsclient.Interface, name string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case crdCondition(crd, apiextensionsv1.Established) && crdCondition(crd, apiextensionsv1.NamesAccepted):
			return nil
		default:
			last = fmt.Sprintf("conditions %+v", crd.Status.Conditions)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for CRD %s to be Established (last: %s): %w", name, last, ctx.Err())
		case <-tick.C:
		}
	}
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == t {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// ApplyYAML server-side applies (forcing conflicts) every object of a
// multi-document YAML or JSON stream, in order. Namespaced objects without a
// namespace go to "default". It returns "kind/name" or
// "kind/namespace/name" for each object applied.
func ApplyYAML(ctx context.Context, cfg *rest.Config, data []byte) ([]string, error) {
	objs, err := decodeYAML(data)
	if err != nil {
		return nil, err
	}
	a, err := newApplier(cfg)
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, obj := range objs {
		ref, err := a.apply(ctx, obj)
		if err != nil {
			return applied, err
		}
		applied = append(applied, ref)
	}
	return applied, nil
}

// ApplyFS applies the *.yaml and *.yml files of fsys in lexical order (see
// ApplyYAML).
func ApplyFS(ctx context.Context, cfg *rest.Config, fsys fs.FS) ([]string, error) {
	files, err := yamlFiles(fsys)
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			return applied, fmt.Errorf("reading %s: %w", f, err)
		}
		refs, err := ApplyYAML(ctx, cfg, data)
		applied = append(applied, refs...)
		if err != nil {
			return applied, fmt.Errorf("applying %s: %w", f, err)
		}
	}
	return applied, nil
}

func yamlFiles(fsys fs.FS) ([]string, error) {
	var files []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := path.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing manifests: %w", err)
	}
	sort.Strings(files)
	return files, nil
}

func decodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding document %d: %w", len(objs)+1, err)
		}
		if len(m) == 0 {
			continue // empty document between separators
		}
		obj := &unstructured.Unstructured{Object: m}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("document %d: apiVersion, kind and metadata.name are required", len(objs)+1)
		}
		objs = append(objs, obj)
	}
}

type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(cfg *rest.Config) (*applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured) (string, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	// A CRD installed a moment ago may not be in discovery yet.
	for wait := 50 * time.Millisecond; apimeta.IsNoMatchError(err) && wait < 5*time.Second; wait *= 2 {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("mapping %s: %w", gvk, ctx.Err())
		case <-time.After(wait):
		}
		a.mapper.Reset()
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return "", fmt.Errorf("mapping %s: %w", gvk, err)
	}
	ref := strings.ToLower(gvk.Kind) + "/" + obj.GetName()
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == apimeta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		ri = a.dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		ref = strings.ToLower(gvk.Kind) + "/" + obj.GetNamespace() + "/" + obj.GetName()
	}
	if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return "", fmt.Errorf("applying %s: %w", ref, err)
	}
	return ref, nil
}
