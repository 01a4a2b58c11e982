package checkpoint

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// takeoverStore records what TakeOver did to the store.
type takeoverStore struct {
	restored, lost atomic.Int32
}

var _ Store = (*takeoverStore)(nil)

func (s *takeoverStore) StateInto(*lease.State) uint64 { return 0 }
func (s *takeoverStore) Changes() uint64               { return 0 }
func (s *takeoverStore) Restore(lease.State) error     { s.restored.Add(1); return nil }
func (s *takeoverStore) EndLeasesOfAbsentProxies() int { return 0 }
func (s *takeoverStore) StateLost()                    { s.lost.Add(1) }

// written is a checkpoint of st as the writer leaves it: the index Secret
// (one shard) in a fake clientset.
func written(t *testing.T, st lease.State) *fake.Clientset {
	t.Helper()
	kube := fake.NewClientset()
	s, err := lease.New(lease.Options{}, clocktesting.NewFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(st); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.SecretName, o.Namespace = "leases", "operator"
	w, err := New(o, Deps{Secrets: kube.CoreV1(), Store: s, Identity: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.write(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	return kube
}

// TakeOver tells "kube-apiserver cannot answer" from "the checkpoint is
// corrupt": the first is retried with backoff, the store untouched, until
// the checkpoint loads or the leadership (ctx) ends; only the second lets
// the replica serve without it (StateLost).
func TestTakeOverRetriesWhatSaysNothingAboutTheCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int   // Secret gets that fail before they answer
		err      error // what they fail with
		cancel   bool  // the leadership ends while it retries
		want     func(error) bool
		restored int32
		lost     int32
	}{
		{name: "a blip", failures: 3, err: apierrors.NewInternalError(errors.New("etcd leader changed")), restored: 1,
			want: func(err error) bool { return err == nil }},
		{name: "timeouts", failures: 5, err: apierrors.NewTimeoutError("request timed out", 1), restored: 1,
			want: func(err error) bool { return err == nil }},
		{name: "unreachable until the leadership ends", failures: 1 << 30, err: errors.New("connection refused"), cancel: true,
			want: func(err error) bool { return errors.Is(err, context.Canceled) }},
		{name: "corrupt", failures: 0, lost: 1, want: func(err error) bool { return err == nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := written(t, lease.State{Revision: 3, TakenAt: t0})
			if tc.name == "corrupt" {
				secrets := kube.CoreV1().Secrets("operator")
				idx, err := secrets.Get(context.Background(), "leases", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				idx.Data[keySHA256] = []byte("0000")
				if _, err := secrets.Update(context.Background(), idx, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var gets atomic.Int32
			kube.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
				if int(gets.Add(1)) <= tc.failures {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			clk := clocktesting.NewFakeClock(t0)
			store := &takeoverStore{}
			o := DefaultOptions()
			o.SecretName, o.Namespace = "leases", "operator"
			c, err := New(o, Deps{Secrets: kube.CoreV1(), Store: store, Clock: clk, Identity: "new"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.TakeOver(ctx, func(context.Context) bool { return true }, nil) }()
			var got error
			for steps := 0; ; steps++ {
				select {
				case got = <-done:
				case <-time.After(time.Millisecond):
					if clk.HasWaiters() {
						if store.restored.Load()+store.lost.Load() > 0 {
							t.Fatal("the store was touched while the checkpoint could not be read")
						}
						if tc.cancel && steps > 50 {
							cancel()
						}
						clk.Step(loadRetryMax)
					}
					continue
				}
				break
			}
			if !tc.want(got) {
				t.Fatalf("TakeOver = %v", got)
			}
			if store.restored.Load() != tc.restored || store.lost.Load() != tc.lost {
				t.Errorf("restored %d, lost %d; want %d, %d", store.restored.Load(), store.lost.Load(), tc.restored, tc.lost)
			}
		})
	}
}
