package apiserver

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"

	"github.com/proxy-operator/proxy-operator/pkg/plainjson"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// decode decodes body into into (whose TypeMeta is tm) as the generic
// server's strict JSON serializer does, and fails unless the body is the kind
// into is. A body of the plain shape client-go sends is read by a scanner
// that knows the two types (reflective decoding was a tenth of this server's
// CPU); anything else — escapes, non-ASCII, unknown or repeated keys, other
// value types — is decoded by the strict decoder the serializer uses.
//
// The serializer parses a body twice, once leniently only to read its kind
// and apiVersion. A strict decode that succeeds has matched every key exactly
// once and case-sensitively, so tm then holds what that first parse would
// have read, and the serializer's rules are applied to it: kind and version
// default from into's first registered kind, and the result must be one of
// into's kinds (another would decode into another type).
// TestLeanPathDecodesAsTheSerializer holds it to the serializer.
func (p *leanPath) decode(body []byte, into runtime.Object, tm *metav1.TypeMeta) error {
	if !scanPlain(body, into) {
		if err := decodeStrict(body, into); err != nil {
			return err
		}
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return err
	}
	kinds, _, err := p.typer.ObjectKinds(into)
	if err != nil {
		return err
	}
	actual, defaults := gv.WithKind(tm.Kind), kinds[0]
	if actual.Kind == "" {
		actual.Kind = defaults.Kind
	}
	if actual.Version == "" && (actual.Group == "" || actual.Group == defaults.Group) {
		actual.Group, actual.Version = defaults.Group, defaults.Version
	}
	if !slices.Contains(kinds, actual) {
		return fmt.Errorf("the body is a %s, not a %T", actual, into)
	}
	return nil
}

// decodeStrict is the serializer's strict decoding.
func decodeStrict(body []byte, into runtime.Object) error {
	strictErrs, err := kjson.UnmarshalStrict(body, into)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return runtime.NewStrictDecodingError(strictErrs)
	}
	return nil
}

// scanPlain decodes a plain body into a new ProxyLease or DeleteOptions and
// reports true, or reports false with into left as it was.
func scanPlain(body []byte, into runtime.Object) bool {
	s := plainjson.NewScanner(body)
	switch obj := into.(type) {
	case *leasingv1alpha1.ProxyLease:
		var pl leasingv1alpha1.ProxyLease
		if scanProxyLease(&s, &pl) && s.End() {
			*obj = pl
			return true
		}
	case *metav1.DeleteOptions:
		var opts metav1.DeleteOptions
		if s.Object(func(key string) bool { return scanTypeMeta(&s, key, &opts.TypeMeta) }) && s.End() {
			*obj = opts
			return true
		}
	}
	return false
}

func scanTypeMeta(s *plainjson.Scanner, key string, tm *metav1.TypeMeta) bool {
	switch key {
	case "kind":
		return s.SetString(&tm.Kind)
	case "apiVersion":
		return s.SetString(&tm.APIVersion)
	}
	return false
}

func scanProxyLease(s *plainjson.Scanner, pl *leasingv1alpha1.ProxyLease) bool {
	return s.Object(func(key string) bool {
		switch key {
		case "metadata":
			return scanObjectMeta(s, &pl.ObjectMeta)
		case "spec":
			return scanSpec(s, &pl.Spec)
		case "status":
			// Status is the server's: only an empty one is plain.
			return s.Object(func(string) bool { return false })
		}
		return scanTypeMeta(s, key, &pl.TypeMeta)
	})
}

func scanObjectMeta(s *plainjson.Scanner, m *metav1.ObjectMeta) bool {
	return s.Object(func(key string) bool {
		switch key {
		case "name":
			return s.SetString(&m.Name)
		case "generateName":
			return s.SetString(&m.GenerateName)
		case "namespace":
			return s.SetString(&m.Namespace)
		case "labels":
			return s.StringMap(&m.Labels)
		case "annotations":
			return s.StringMap(&m.Annotations)
		case "creationTimestamp":
			// Older clients send null for the zero time.
			return s.Null()
		}
		return false
	})
}

func scanSpec(s *plainjson.Scanner, sp *leasingv1alpha1.ProxyLeaseSpec) bool {
	return s.Object(func(key string) bool {
		switch key {
		case "selector":
			return s.StringMap(&sp.Selector)
		case "target":
			return s.SetString(&sp.Target)
		case "ttlSeconds":
			sp.TTLSeconds = new(int32)
			return s.SetInt32(sp.TTLSeconds)
		case "waitSeconds":
			return s.SetInt32(&sp.WaitSeconds)
		case "priority":
			return s.SetInt32(&sp.Priority)
		}
		return false
	})
}
