package devenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	artifacts "github.com/proxy-operator/proxy-operator/artifacts/apiserver"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// APIServiceName is the APIService of the ProxyLease API.
const APIServiceName = "v1alpha1.leasing.crawl.example.com"

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// aggregationComponent completes the registration of the operator's
// aggregated API server with kube-apiserver (registerAPIService, before the
// operator starts, applied artifacts/apiserver's dev variant): the shipped
// delegation RBAC and ClusterRoles, then the APIService turning Available,
// which needs the caBundle the operator wrote.
type aggregationComponent struct {
	dyn    dynamic.Interface
	cpDone <-chan struct{}
}

func (c *aggregationComponent) name() string { return "ProxyLease APIService (artifacts/apiserver)" }

// registerAPIService applies the dev manifest (Namespace, ExternalName
// Service, APIService), its APIService pointed at port and verified against
// the caBundle the operator writes into it (nothing is skipped).
func registerAPIService(ctx context.Context, cfg *rest.Config, port int) error {
	dev, err := fs.ReadFile(artifacts.Dev, "dev/apiservice.yaml")
	if err != nil {
		return err
	}
	objs, err := decodeManifests(dev)
	if err != nil {
		return fmt.Errorf("dev/apiservice.yaml: %w", err)
	}
	var found bool
	for _, o := range objs {
		if o.GetKind() != "APIService" {
			continue
		}
		found = true
		unstructured.RemoveNestedField(o.Object, "spec", "insecureSkipTLSVerify")
		if err := unstructured.SetNestedField(o.Object, int64(port), "spec", "service", "port"); err != nil {
			return err
		}
	}
	if !found {
		return errors.New("dev/apiservice.yaml holds no APIService")
	}
	// The Namespace comes first in the dev manifest.
	_, err = applyObjects(ctx, cfg, objs)
	return err
}

// start applies the shipped delegation RBAC and ClusterRoles and waits for
// the APIService the operator component registered to turn Available.
func (c *aggregationComponent) start(ctx context.Context, e *Env) error {
	cfg := e.ControlPlane.RESTConfig()
	for _, f := range []string{"rbac.yaml", "clusterroles.yaml"} {
		data, err := fs.ReadFile(artifacts.FS, f)
		if err != nil {
			return err
		}
		if _, err := controlplane.ApplyYAML(ctx, cfg, data); err != nil {
			return fmt.Errorf("applying %s: %w", f, err)
		}
	}
	var err error
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	c.cpDone = e.ControlPlane.Done()
	return c.waitAvailable(ctx, 90*time.Second)
}

func (c *aggregationComponent) waitAvailable(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "not found"
	for {
		u, err := c.dyn.Resource(apiServiceGVR).Get(ctx, APIServiceName, metav1.GetOptions{})
		if err == nil {
			if ok, why := available(u); ok {
				return nil
			} else if why != "" {
				last = why
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("APIService %s not Available within %s (last: %s)", APIServiceName, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// available reads the Available condition of an APIService.
func available(u *unstructured.Unstructured) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" {
			return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"])
		}
	}
	return false, ""
}

// stop unregisters the APIService first, so kube-apiserver stops proxying
// to a server about to go away (and its discovery stops failing for it).
func (c *aggregationComponent) stop(ctx context.Context) error {
	select {
	case <-c.cpDone:
		return nil // kube-apiserver is gone, and its registrations with it
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := c.dyn.Resource(apiServiceGVR).Delete(ctx, APIServiceName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting APIService %s: %w", APIServiceName, err)
	}
	return nil
}

// decodeManifests decodes a multi-document YAML stream.
func decodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding document %d: %w", len(out)+1, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// applyObjects server-side applies objs in order (controlplane.ApplyYAML
// takes JSON as well) and returns what it applied.
func applyObjects(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) ([]string, error) {
	var refs []string
	for _, o := range objs {
		data, err := json.Marshal(o.Object)
		if err != nil {
			return refs, err
		}
		r, err := controlplane.ApplyYAML(ctx, cfg, data)
		refs = append(refs, r...)
		if err != nil {
			return refs, err
		}
	}
	return refs, nil
}
