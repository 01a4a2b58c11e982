package proxylease

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// BenchmarkRESTCreateDelete is the storage's own cost of a create+delete pair
// (validation, acquire, watch-cache update, release), with and without a
// watcher, without HTTP or the API servers around it:
//
//	go test ./pkg/registry/proxylease -run '^$' -bench RESTCreateDelete -benchmem
func BenchmarkRESTCreateDelete(b *testing.B) {
	for _, watchers := range []int{0, 1} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			f := newFixture(b, lease.Options{}, proxy("ns", "px", nil))
			ctx := ctxFor("ns", "u")
			for i := 0; i < watchers; i++ {
				w, err := f.rest.Watch(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for range w.ResultChan() {
					}
				}()
				defer w.Stop()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				pl := &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "b-"}}
				obj, err := f.rest.Create(ctx, pl, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := f.rest.Delete(ctx, obj.(*leasingv1alpha1.ProxyLease).Name, nil, &metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
