package pool

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// A waiting request is demand only for the pools it could be granted from:
// those of its namespace, or of the namespaces a request without one is
// limited to (an HTTP token's, #26 item 5).
func TestServes(t *testing.T) {
	pool := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p"}}
	pool.Spec.Template.Spec.Attributes = map[string]crawlv1alpha1.AttributeValue{"zone": "x"}
	for _, tc := range []struct {
		name string
		req  lease.AcquireRequest
		want bool
	}{
		{"its namespace", lease.AcquireRequest{Namespace: "team-a"}, true},
		{"another namespace", lease.AcquireRequest{Namespace: "team-b"}, false},
		{"any namespace", lease.AcquireRequest{}, true},
		{"limited to namespaces including its", lease.AcquireRequest{Namespaces: []string{"team-b", "team-a"}}, true},
		{"limited to other namespaces", lease.AcquireRequest{Namespaces: []string{"team-b"}}, false},
		{"a selector the template satisfies", lease.AcquireRequest{Selector: map[string]string{"zone": "x"}}, true},
		{"a selector it does not", lease.AcquireRequest{Selector: map[string]string{"zone": "y"}}, false},
	} {
		if got := serves(pool, tc.req); got != tc.want {
			t.Errorf("%s: serves = %v, want %v", tc.name, got, tc.want)
		}
	}
}
