package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
)

// TestExpectationWait: a pool's next step waits until the cache shows its
// last one, for at most expectationTimeout, and says how long that may be
// so the reconcile is requeued. A Proxy the pool created counts as seen when
// the cache lists it at all: released before this pool saw it labelled as
// its own, it is no member, and the pool waited for it forever (the flake of
// TestAdoptAndRelease: no replacement, nothing requeued).
func TestExpectationWait(t *testing.T) {
	at := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "ns", Name: "pool"}
	member := func(name, uid string) *crawlv1alpha1.Proxy {
		return &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	}
	for _, tc := range []struct {
		name    string
		exp     *expectation
		st      observed
		elapsed time.Duration
		want    time.Duration
	}{
		{name: "no step before", st: observed{}, want: 0},
		{
			name: "created, not in the cache yet", elapsed: 10 * time.Second, want: 20 * time.Second,
			exp: &expectation{creates: map[string]bool{"pool-a": true}},
			st:  observed{listed: map[string]bool{"other": true}},
		},
		{
			name: "created, a member now",
			exp:  &expectation{creates: map[string]bool{"pool-a": true}},
			st:   observed{live: []*crawlv1alpha1.Proxy{member("pool-a", "u1")}, listed: map[string]bool{"pool-a": true}},
		},
		{
			name: "created, then released before the pool saw it labelled",
			exp:  &expectation{creates: map[string]bool{"pool-a": true}},
			st:   observed{listed: map[string]bool{"pool-a": true}},
		},
		{
			name: "created, never seen, the expectation timed out", elapsed: expectationTimeout,
			exp: &expectation{creates: map[string]bool{"pool-a": true}},
		},
		{
			name: "deleted, still in the cache", elapsed: time.Second, want: expectationTimeout - time.Second,
			exp: &expectation{deletes: map[types.UID]bool{"u1": true}},
			st:  observed{draining: []*crawlv1alpha1.Proxy{member("pool-a", "u1")}, listed: map[string]bool{"pool-a": true}},
		},
		{
			name: "deleted, gone from the cache",
			exp:  &expectation{deletes: map[types.UID]bool{"u1": true}},
			st:   observed{listed: map[string]bool{}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{}
			if tc.exp != nil {
				tc.exp.at = at
				if tc.exp.creates == nil {
					tc.exp.creates = map[string]bool{}
				}
				if tc.exp.deletes == nil {
					tc.exp.deletes = map[types.UID]bool{}
				}
				r.setExpectation(key, *tc.exp)
			}
			if got := r.expectationWait(key, &tc.st, at.Add(tc.elapsed)); got != tc.want {
				t.Errorf("expectationWait = %v, want %v", got, tc.want)
			}
		})
	}
}
