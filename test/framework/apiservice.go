package framework

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// APIServiceGVR is the resource of APIServices (read through a dynamic
// client: the aggregator's clientset is not a dependency of the module).
var APIServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// APIServiceAvailable reads the Available condition of APIService name
// and, when it is not True, why.
func APIServiceAvailable(ctx context.Context, dyn dynamic.Interface, name string) (bool, string) {
	u, err := dyn.Resource(APIServiceGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		if m["type"] == "Available" {
			return m["status"] == "True", fmt.Sprint(m["reason"], ": ", m["message"])
		}
	}
	return false, "no Available condition"
}
