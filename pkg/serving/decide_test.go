package serving

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type podState struct {
	name                   string
	ready, deleting        bool
	label, leaderAnnotated bool
}

func pod(s podState) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: map[string]string{"app.kubernetes.io/name": "proxy-operator"}, Annotations: map[string]string{}}}
	st := corev1.ConditionFalse
	if s.ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if s.deleting {
		p.DeletionTimestamp = &metav1.Time{}
	}
	if s.label {
		p.Labels[LabelKey] = LabelValue
	}
	if s.leaderAnnotated {
		p.Annotations[LeaderAnnotation] = LabelValue
	}
	return p
}

func split(self string, all []podState) (*corev1.Pod, []*corev1.Pod) {
	var me *corev1.Pod
	var peers []*corev1.Pod
	for _, s := range all {
		if s.name == self {
			me = pod(s)
			continue
		}
		peers = append(peers, pod(s))
	}
	return me, peers
}

func TestDecide(t *testing.T) {
	ready := func(name string) podState { return podState{name: name, ready: true} }
	leader := func(name string) podState {
		return podState{name: name, ready: true, label: true, leaderAnnotated: true}
	}
	tests := []struct {
		name    string
		self    string
		serving bool
		pods    []podState
		want    []Change
	}{
		{"new leader labels itself and unlabels the old one", "b", true,
			[]podState{leader("a"), ready("b")},
			[]Change{{Pod: "b", Label: true, Leader: true}, {Pod: "a"}}},
		{"leader in place: nothing", "a", true,
			[]podState{leader("a"), ready("b")}, nil},
		{"standby beside a live leader: nothing", "b", false,
			[]podState{leader("a"), ready("b")}, nil},
		{"the leader's pod is being deleted: the standby labels itself as successor", "b", false,
			[]podState{{name: "a", ready: true, deleting: true, label: true, leaderAnnotated: true}, ready("b")},
			[]Change{{Pod: "b", Label: true}}},
		{"a leader being deleted leaves its successor the label", "a", true,
			[]podState{{name: "a", ready: true, deleting: true, label: true, leaderAnnotated: true}, {name: "b", ready: true, label: true}}, nil},
		{"a leader that is not Ready leaves its successor the label", "a", true,
			[]podState{{name: "a", label: true, leaderAnnotated: true}, {name: "b", ready: true, label: true}}, nil},
		{"the leader is not Ready: the standby labels itself", "b", false,
			[]podState{{name: "a", label: true, leaderAnnotated: true}, ready("b")},
			[]Change{{Pod: "b", Label: true}}},
		{"two successors: the larger name yields", "b", false,
			[]podState{{name: "a", ready: true, label: true}, {name: "b", ready: true, label: true}},
			[]Change{{Pod: "b"}}},
		{"two successors: the smaller name keeps it", "a", false,
			[]podState{{name: "a", ready: true, label: true}, {name: "b", ready: true, label: true}}, nil},
		{"a restarted former leader (standby now) drops the annotation", "a", false,
			[]podState{leader("a"), ready("b")},
			[]Change{{Pod: "a", Label: true}}},
		{"a standby being deleted drops its label", "b", false,
			[]podState{{name: "a", ready: true}, {name: "b", ready: true, deleting: true, label: true}},
			[]Change{{Pod: "b"}}},
		{"a standby not Ready yet does not label itself as successor", "b", false,
			[]podState{{name: "a", ready: true, deleting: true, label: true, leaderAnnotated: true}, {name: "b"}}, nil},
		{"a standby that is no longer Ready drops its label", "b", false,
			[]podState{{name: "a", ready: true, deleting: true, label: true, leaderAnnotated: true}, {name: "b", label: true}},
			[]Change{{Pod: "b"}}},
		{"own pod not seen yet: nothing", "x", true,
			[]podState{leader("a")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			self, peers := split(tt.self, tt.pods)
			got := Decide(self, peers, tt.serving)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
}

type decideFunc func(self *corev1.Pod, peers []*corev1.Pod, serving bool) []Change

// converge lets every replica apply decide to the same view of the pods, as
// replicas watching at once do, then applies every change, until no one
// changes anything; it reports the live labelled pods and whether a fixpoint
// was reached within 20 rounds.
func converge(decide decideFunc, pods []podState, serving string) ([]string, bool) {
	byName := map[string]*podState{}
	for i := range pods {
		byName[pods[i].name] = &pods[i]
	}
	for range 20 {
		var changes []Change
		for _, s := range pods {
			if s.deleting && s.name != serving {
				continue // its process is gone
			}
			self, peers := split(s.name, pods)
			changes = append(changes, decide(self, peers, s.name == serving)...)
		}
		for _, c := range changes {
			p := byName[c.Pod]
			p.label, p.leaderAnnotated = c.Label, c.Leader
		}
		if len(changes) == 0 {
			var labelled []string
			for _, s := range pods {
				if s.label && s.ready && !s.deleting {
					labelled = append(labelled, s.name)
				}
			}
			slices.Sort(labelled)
			return labelled, true
		}
	}
	return nil, false
}

// TestDecideConverges runs the rule on every replica of a scenario until it
// settles: exactly one live pod carries the label, the leader when there is
// one. The same check on a rule without the successors' tie-break never
// settles (the negative control).
func TestDecideConverges(t *testing.T) {
	tests := []struct {
		name    string
		pods    []podState
		serving string
		want    []string
	}{
		{"fresh install, b leads", []podState{{name: "a", ready: true}, {name: "b", ready: true}}, "b", []string{"b"}},
		{"fresh install, no leader yet: one successor", []podState{{name: "a", ready: true}, {name: "b", ready: true}, {name: "c", ready: true}}, "", []string{"a"}},
		{"rollout: the leader deleted, a new pod and the old standby",
			[]podState{{name: "a", ready: true, deleting: true, label: true, leaderAnnotated: true}, {name: "c", ready: true}, {name: "b", ready: true}}, "a", []string{"b"}},
		{"the successor took over", []podState{{name: "a", ready: true, deleting: true, label: true, leaderAnnotated: true}, {name: "b", ready: true, label: true}}, "b", []string{"b"}},
		{"crash: the old leader's pod stays Ready, labelled", []podState{{name: "a", ready: true, label: true, leaderAnnotated: true}, {name: "b", ready: true}}, "b", []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := converge(Decide, slices.Clone(tt.pods), tt.serving)
			if !ok {
				t.Fatal("the replicas never settle")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("live labelled pods (-want +got):\n%s", diff)
			}
		})
	}
	noTieBreak := func(self *corev1.Pod, peers []*corev1.Pod, serving bool) []Change {
		if serving || terminating(self) {
			return Decide(self, peers, serving)
		}
		want := !slices.ContainsFunc(peers, func(p *corev1.Pod) bool { return live(p) && labelled(p) })
		if want != labelled(self) {
			return []Change{{Pod: self.Name, Label: want}}
		}
		return nil
	}
	if _, ok := converge(noTieBreak, []podState{{name: "a", ready: true}, {name: "b", ready: true}}, ""); ok {
		t.Error("negative control: successors without a tie-break settled; the convergence check would not catch an oscillating rule")
	}
}

func TestStepOut(t *testing.T) {
	deletingLeader := podState{name: "a", ready: true, deleting: true, label: true, leaderAnnotated: true}
	tests := []struct {
		name       string
		self       string
		pods       []podState
		wantDone   bool
		wantChange *Change
	}{
		{"the successor carries the label: the leader being deleted removes its own", "a",
			[]podState{deletingLeader, {name: "b", ready: true, label: true}}, true, &Change{Pod: "a"}},
		{"the successor carries the label and leads already: the same", "a",
			[]podState{deletingLeader, {name: "b", ready: true, label: true, leaderAnnotated: true}}, true, &Change{Pod: "a"}},
		{"no successor yet: wait", "a",
			[]podState{deletingLeader, {name: "b", ready: true}}, false, nil},
		{"the only labelled peer is not Ready: wait", "a",
			[]podState{deletingLeader, {name: "b", label: true}}, false, nil},
		{"the only labelled peer is being deleted too: wait", "a",
			[]podState{deletingLeader, {name: "b", ready: true, deleting: true, label: true}}, false, nil},
		{"alone: wait (the wait is bounded by the caller)", "a",
			[]podState{deletingLeader}, false, nil},
		{"not labelled: out already", "b",
			[]podState{{name: "a", ready: true, label: true, leaderAnnotated: true}, {name: "b", ready: true, deleting: true}}, true, nil},
		{"labelled but not being deleted (leadership lost): no successor comes, keep it", "a",
			[]podState{{name: "a", ready: true, label: true, leaderAnnotated: true}, {name: "b", ready: true}}, true, nil},
		{"own pod not seen: nothing to do", "x",
			[]podState{deletingLeader}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			self, peers := split(tt.self, tt.pods)
			done, change := StepOut(self, peers)
			if done != tt.wantDone {
				t.Errorf("done = %v, want %v", done, tt.wantDone)
			}
			if diff := cmp.Diff(tt.wantChange, change); diff != "" {
				t.Errorf("change (-want +got):\n%s", diff)
			}
			// Whatever it does, a live pod keeps the label when one had it.
			if change != nil && !slices.ContainsFunc(peers, func(p *corev1.Pod) bool { return live(p) && labelled(p) }) {
				t.Errorf("stepping out left no live labelled pod")
			}
		})
	}
}
