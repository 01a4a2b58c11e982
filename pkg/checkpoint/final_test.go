package checkpoint

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// namespaceTerminating is kube-apiserver's answer to a create in a namespace
// being deleted.
func namespaceTerminating() error {
	err := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "leases-1",
		errors.New("unable to create new content in namespace operator because it is being terminated"))
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace operator is being terminated"}}
	return err
}

// The last checkpoint is retried through an outage, and given up at once
// when kube-apiserver refuses it for good: an uninstall deletes the
// namespace while the pod stops, and retrying held the pod for the whole
// finalWriteDeadline (about 128 s on a real node).
func TestLastCheckpointRetriesOutagesNotRefusals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int // writes that fail before they answer
		err      error
		want     func(error) bool
		writes   [2]int32 // calls that create or update a Secret: at least, at most
	}{
		{name: "namespace being deleted", failures: 1 << 30, err: namespaceTerminating(), writes: [2]int32{1, 1},
			want: func(err error) bool { return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) }},
		{name: "token no longer valid", failures: 1 << 30, err: apierrors.NewUnauthorized("token has been invalidated"), writes: [2]int32{1, 1},
			want: apierrors.IsUnauthorized},
		{name: "role removed", failures: 1 << 30, err: apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "leases", errors.New("RBAC: access denied")),
			writes: [2]int32{1, 1}, want: apierrors.IsForbidden},
		{name: "an outage that ends", failures: 3, err: apierrors.NewServiceUnavailable("etcd unavailable"), writes: [2]int32{6, 6},
			// 3 refused, then a shard and the index's create, which meets the
			// index there (this writer's: nothing changed since), then the
			// update that marks it final
			want: func(err error) bool { return err == nil }},
		{name: "an outage that does not end", failures: 1 << 30, err: errors.New("connection refused"),
			// Retried until the deadline: about one write per pause, fewer when the
			// test's clock steps past a pause while a write is under way.
			writes: [2]int32{10, int32(finalWriteDeadline/(250*time.Millisecond)) + 1},
			want:   func(err error) bool { return err != nil && !apierrors.IsForbidden(err) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := written(t, lease.State{Revision: 3, TakenAt: t0})
			var writes atomic.Int32
			fail := func(k8stesting.Action) (bool, runtime.Object, error) {
				if int(writes.Add(1)) <= tc.failures {
					return true, nil, tc.err
				}
				return false, nil, nil
			}
			kube.PrependReactor("create", "secrets", fail)
			kube.PrependReactor("update", "secrets", fail)
			clk := clocktesting.NewFakeClock(t0)
			o := DefaultOptions()
			o.SecretName, o.Namespace = "leases", "operator"
			c, err := New(o, Deps{Secrets: kube.CoreV1(), Store: &takeoverStore{}, Clock: clk, Identity: "old"}) // the writer of the checkpoint: not fenced
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.final(context.Background()) }()
			var got error
			for steps := 0; ; steps++ {
				if steps > 100_000 {
					t.Fatal("the last checkpoint never returned")
				}
				select {
				case got = <-done:
				case <-time.After(time.Millisecond):
					if clk.HasWaiters() {
						clk.Step(250 * time.Millisecond)
					}
					continue
				}
				break
			}
			if !tc.want(got) {
				t.Errorf("final = %v", got)
			}
			if n := writes.Load(); n < tc.writes[0] || n > tc.writes[1] {
				t.Errorf("%d writes, want %d to %d", n, tc.writes[0], tc.writes[1])
			}
		})
	}
}
