package serving

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock records the writes that reach it.
type fakeLock struct {
	writes []string // "create <holder>", "update <holder>"
}

var _ resourcelock.Interface = (*fakeLock)(nil)

func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{}, nil, nil
}

func (f *fakeLock) Create(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	f.writes = append(f.writes, "create "+ler.HolderIdentity)
	return nil
}

func (f *fakeLock) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	f.writes = append(f.writes, "update "+ler.HolderIdentity)
	return nil
}

func (f *fakeLock) RecordEvent(string) {}
func (f *fakeLock) Identity() string   { return "me" }
func (f *fakeLock) Describe() string   { return "fake" }

// A replica takes the lock only while its pod is Ready, keeps renewing it
// whatever its readiness, and after releasing it is gated again.
func TestReadyLock(t *testing.T) {
	type step struct {
		op      string // create, update (take or renew as "me"), release
		ready   bool
		readErr error
		wantErr string // "" none, "notReady", "other"
	}
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
	tests := []struct {
		name       string
		steps      []step
		wantWrites []string
	}{
		{"not ready: no create", []step{{op: "create", wantErr: "notReady"}}, nil},
		{"ready: create", []step{{op: "create", ready: true}}, []string{"create me"}},
		{"not ready: no take-over of a free or expired lock", []step{{op: "update", wantErr: "notReady"}}, nil},
		{"held: renewals go through while unready", []step{{op: "create", ready: true}, {op: "update"}, {op: "update"}},
			[]string{"create me", "update me", "update me"}},
		{"released: gated again", []step{{op: "update", ready: true}, {op: "release"}, {op: "update", wantErr: "notReady"}},
			[]string{"update me", "update "}},
		{"no pod to read: as without the gate", []step{{op: "create", readErr: notFound}}, []string{"create me"}},
		{"reading the pod failed: held back", []step{{op: "create", readErr: errors.New("connection refused"), wantErr: "other"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLock{}
			var cur step
			l := ReadyLock(f, func(context.Context) (bool, error) { return cur.ready, cur.readErr })
			for i, s := range tt.steps {
				cur = s
				var err error
				switch s.op {
				case "create":
					err = l.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
				case "update":
					err = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
				case "release":
					err = l.Update(context.Background(), resourcelock.LeaderElectionRecord{})
				}
				got := ""
				switch {
				case IsNotReady(err):
					got = "notReady"
				case err != nil:
					got = "other"
				}
				if got != s.wantErr {
					t.Errorf("step %d (%s): error %v, want %q", i, s.op, err, s.wantErr)
				}
			}
			if diff := cmp.Diff(tt.wantWrites, f.writes); diff != "" {
				t.Errorf("writes reaching the lock (-want +got):\n%s", diff)
			}
		})
	}
}
